"""``elicitd payments reconcile``: settle checkouts whose webhook never came.

Run it from cron (every few minutes is plenty); it is safe on any number of replicas at once,
because each settlement is the same conditional transition the webhook makes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.kind_context import OpenKind


def register(subparsers: Any, open_kind: OpenKind) -> None:
    payments = subparsers.add_parser("payments", help="payment flows")
    payments_sub = payments.add_subparsers(dest="payments_command", required=True)
    reconcile = payments_sub.add_parser("reconcile", help="ask the payment provider about unsettled checkouts")
    reconcile.add_argument(
        "--older-than", type=float, default=300.0, help="only checkouts untouched for this many seconds (default 300)"
    )
    reconcile.add_argument("--limit", type=int, default=500)
    reconcile.add_argument("--json", action="store_true")
    reconcile.set_defaults(func=functools.partial(cmd_reconcile, open_kind=open_kind))


async def _reconcile(args: argparse.Namespace, open_kind: OpenKind) -> list[dict[str, Any]]:
    from service.payments.plugin import PaymentKindServices

    # The services are started, so completions wake MCP servers waiting on other replicas.
    async with open_kind("payment", PaymentKindServices) as kind:
        actions = await kind.payments.reconcile(older_than_seconds=args.older_than, limit=args.limit)
    return [dataclasses.asdict(a) for a in actions]


def cmd_reconcile(args: argparse.Namespace, *, open_kind: OpenKind) -> None:
    from service.cli_output import print_table

    rows = asyncio.run(_reconcile(args, open_kind))
    print_table(rows, ["flow_id", "session_id", "provider_status", "outcome"], as_json=args.json)
