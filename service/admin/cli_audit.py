"""``elicitd admin audit``: read the audit log, check its hash chain (``verify``), export it as JSON
lines (``export``). Each writes its own audit row (actor ``cli``), as every admin command does:
reading the log is recorded like any other admin call."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from service.cli_exits import CommandFailed, ExitCode
from service.cli_output import print_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.ext.asyncio import AsyncSession

_COLUMNS = ["seq", "id", "at", "admin_token_id", "actor", "operation", "target", "status"]


async def _since(session: AsyncSession, raw: str | None) -> datetime | None:
    """An RFC 3339 time, or a duration back from the database's clock (``24h``, ``7d``)."""
    from sqlalchemy import func, select

    from service.admin.tokens import parse_lifetime
    from service.errors import InvalidRequest

    if raw is None:
        return None
    try:
        found = datetime.fromisoformat(raw)
    except ValueError:
        window = parse_lifetime(raw)
        moment: datetime = (await session.execute(select(func.now() - window))).scalar_one()
        return moment
    if found.tzinfo is None:
        raise InvalidRequest("--since needs a time zone (…Z or +00:00), or a duration such as 24h.")
    return found


async def _list(state: Any, args: argparse.Namespace) -> Any:
    from service.admin.audit import AuditFilter, list_audit

    async with state.sessions() as session:
        narrowed = AuditFilter(
            admin_token_id=args.token,
            actor=args.actor,
            operation=args.only_operation,
            since=await _since(session, args.since),
        )
        return await list_audit(session, cursor=args.cursor, limit=args.limit, narrowed=narrowed)


async def _verify(state: Any, args: argparse.Namespace) -> Any:
    from service.admin.audit import verify_chain

    async with state.sessions() as session:
        return await verify_chain(session)


async def _export(state: Any, args: argparse.Namespace) -> int:
    from service.admin.audit import export_lines

    written = 0
    async with state.sessions() as session:
        since = await _since(session, args.since)
        async for line in export_lines(session, since=since, after_seq=args.after_seq, fmt=args.format):
            sys.stdout.write(line)
            written += 1
    sys.stdout.flush()
    return written


def _verdict(result: dict[str, Any]) -> str:
    if result["ok"]:
        return (
            f"audit chain intact: {result['checked']} rows, seq {result['tail_seq'] + 1} to {result['head_seq']}, "
            f"head {result['head_hash']}"
        )
    broken = result["broken"]
    named = f"seq {broken['seq']}" + (f" ({broken['id']})" if broken["id"] else "")
    return f"audit chain broken at {named}: {broken['kind']}: {broken['reason']}"


def register_audit(groups: Any, leaf: Any, command: Any, run_audited: Callable[[Any, argparse.Namespace], Any]) -> None:
    """``run_audited(handler, args)`` runs a handler on the services and writes its audit row."""
    audit = leaf(groups, "audit", "adminListAudit", command(_list, _COLUMNS, rows=lambda r: r["items"]), paged=True)
    audit.add_argument("--token", help="only this admin token's calls")
    audit.add_argument("--actor", choices=["api", "cli", "console"], help="only calls made this way")
    # Not ``dest="operation"``: that is the command's own operation id, the one its audit row names.
    audit.add_argument("--operation", dest="only_operation", help="only this operation (adminCancelFlow, …)")
    audit.add_argument("--since", help="only rows at or after this time (RFC 3339) or this long ago (24h, 7d)")
    actions = audit.add_subparsers(dest="audit_cmd", metavar="{verify,export}")

    def verify(args: argparse.Namespace) -> None:
        result = msgspec.to_builtins(asyncio.run(run_audited(_verify, args)))
        if args.json:
            print_json(result)
        elif result["ok"]:
            print(_verdict(result))
        if not result["ok"]:  # the verdict goes to stderr, as every failure's line does
            raise CommandFailed(_verdict(result), ExitCode.AUDIT_BROKEN)

    checker = actions.add_parser("verify", help="check the hash chain; exit 6 naming the first broken link")
    checker.add_argument("--json", action="store_true", help="print JSON instead of a line")
    checker.set_defaults(func=verify, operation="adminVerifyAudit")

    def export(args: argparse.Namespace) -> None:
        asyncio.run(run_audited(_export, args))

    exporter = actions.add_parser("export", help="the rows as JSON lines, oldest link first (for a SIEM)")
    exporter.add_argument("--since", help="rows at or after this time (RFC 3339) or this long ago (24h, 7d)")
    exporter.add_argument("--after-seq", type=int, help="only rows above this seq (the last line of a previous export)")
    exporter.add_argument("--format", choices=["jsonl"], default="jsonl")
    exporter.set_defaults(func=export, operation="adminExportAudit")
