"""``elicitd operators signin|show|clear``: the issuer operators sign in at, and their roles.

``signin`` marks an issuer already registered (``elicitd issuers add``) for operator sign-in: the
ID-token claim carrying the role, and per role the claim values granting it. Marking, changing the
mapping or clearing it ends every console session, and each is written to the admin audit log
(actor ``cli``), like the admin commands.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.tokens import Role
from service.cli_output import print_json, report
from service.errors import NotFound

T = TypeVar("T")


async def _audited(operation: str, target: str | None, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    from service.db.audit import audited
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work
    from service.settings import Settings

    engine = make_engine(Settings.from_env())
    sessions = make_sessionmaker(engine)

    async def run() -> T:
        async with unit_of_work(sessions) as session:
            return await work(session)

    try:
        return await audited(sessions, operation, run, target=lambda: target)
    finally:
        await engine.dispose()


def cmd_signin(args: argparse.Namespace) -> None:
    from service.operators.store import mark_issuer, role_values

    roles = role_values({role.label: getattr(args, role.label) or [] for role in Role})

    async def work(session: AsyncSession) -> None:
        await mark_issuer(session, args.issuer, role_claim=args.role_claim, roles=roles, audience=args.audience)

    asyncio.run(_audited("cliMarkOperatorIssuer", f"issuer={args.issuer}", work))
    report(
        args.json,
        {"issuer": args.issuer, "role_claim": args.role_claim, **{r.label: sorted(v) for r, v in roles.items()}},
        f"operators sign in at {args.issuer}; role from claim {args.role_claim!r} (console sessions ended)",
    )


def cmd_show(args: argparse.Namespace) -> None:
    from service.operators.store import marked_issuer, public_view

    async def work(session: AsyncSession) -> dict[str, Any]:
        return public_view(await marked_issuer(session))

    view = asyncio.run(_audited("cliShowOperatorIssuer", None, work))
    if args.json:
        print_json(view)
    elif view["issuer"] is None:
        print("no issuer is marked for operator sign-in")
    else:
        for key, value in view.items():
            shown = " ".join(value) if isinstance(value, list) else ("-" if value is None else value)
            print(f"{key}: {shown}")


def cmd_clear(args: argparse.Namespace) -> None:
    from service.operators.store import clear_mark

    async def work(session: AsyncSession) -> bool:
        return await clear_mark(session)

    if not asyncio.run(_audited("cliClearOperatorIssuer", None, work)):
        raise NotFound("no issuer is marked for operator sign-in")
    report(args.json, {"issuer": None}, "no issuer is marked for operator sign-in now (console sessions ended)")


def register(subparsers: Any) -> None:
    operators = subparsers.add_parser("operators", help="operator sign-in for the console (issuer and roles)")
    sub = operators.add_subparsers(dest="operators_command", required=True)
    signin = sub.add_parser("signin", help="mark a registered issuer for operator sign-in, with its role mapping")
    signin.add_argument("--issuer", required=True, help="the issuer URL (registered with `elicitd issuers add`)")
    signin.add_argument("--role-claim", required=True, help="the ID token's claim carrying the role, e.g. groups")
    for role in Role:
        signin.add_argument(
            f"--{role.label}",
            action="append",
            metavar="VALUE",
            help=f"a claim value granting {role.label} (repeatable)",
        )
    signin.add_argument("--audience", help="the audience of operators' access tokens (the admin MCP server)")
    signin.add_argument("--json", action="store_true")
    signin.set_defaults(func=cmd_signin)
    show = sub.add_parser("show", help="the issuer marked for operator sign-in and its role mapping")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)
    clear = sub.add_parser("clear", help="unmark it: nobody can sign in to the console (ends its sessions)")
    clear.add_argument("--json", action="store_true")
    clear.set_defaults(func=cmd_clear)
