"""``elicitd payments reconcile``: settle checkouts whose webhook never came.

Run it from cron (every few minutes is plenty); it is safe on any number of replicas at once,
because each settlement is the same conditional transition the webhook makes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any


def register(subparsers: Any) -> None:
    payments = subparsers.add_parser("payments", help="payment flows")
    payments_sub = payments.add_subparsers(dest="payments_command", required=True)
    reconcile = payments_sub.add_parser("reconcile", help="ask the payment provider about unsettled checkouts")
    reconcile.add_argument(
        "--older-than", type=float, default=300.0, help="only checkouts untouched for this many seconds (default 300)"
    )
    reconcile.add_argument("--limit", type=int, default=500)
    reconcile.add_argument("--json", action="store_true")
    reconcile.set_defaults(func=cmd_reconcile)


async def _reconcile(args: argparse.Namespace) -> list[dict[str, Any]]:
    from service.services import open_services
    from service.settings import Settings

    # The services are started, so completions wake MCP servers waiting on other replicas.
    async with open_services(Settings.from_env().with_(background_tasks=False)) as services:
        actions = await services.payments.reconcile(older_than_seconds=args.older_than, limit=args.limit)
    return [dataclasses.asdict(a) for a in actions]


def cmd_reconcile(args: argparse.Namespace) -> None:
    from service.cli_output import print_table

    rows = asyncio.run(_reconcile(args))
    print_table(rows, ["flow_id", "session_id", "provider_status", "outcome"], as_json=args.json)
