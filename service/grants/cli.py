"""``elicitd groups …`` and ``elicitd grants …``: trust groups and grants from a shell.

The commands talk to PostgreSQL directly (``ELICITD_DATABASE_URL`` and ``ELICITD_KEYS`` as for
``serve``) through the functions behind the admin API, and each writes its audit row as every
command does (``service.db.audit``: actor ``cli``, the status the admin API would have answered,
refusals included). ``--json`` prints one JSON document. A refusal is
one line on stderr ending in its stable code in parentheses, the admin API's ``code``
(``… (unproven_member)``), and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from service.cli_exits import CommandFailed, ExitCode
from service.cli_output import print_json, print_table
from service.errors import Conflict, InvalidRequest, NotFound

Work = Callable[[AsyncSession, argparse.Namespace], Awaitable[Any]]

_GROUP_COLUMNS = ["id", "name", "display_name", "members", "warnings"]
_GRANT_COLUMNS = ["id", "connection_id", "grantee", "scopes", "origin", "last_used_at", "revoked_at"]


async def _audited(work: Work, args: argparse.Namespace) -> Any:
    from service.db import audit
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work
    from service.settings import Settings

    engine = make_engine(Settings.from_env())
    sessions = make_sessionmaker(engine)

    async def run() -> Any:
        async with unit_of_work(sessions) as session:
            return await work(session, args)

    try:
        result = await audit.audited(sessions, args.operation, run, target=lambda: _target(args))
        return msgspec.to_builtins(result)
    finally:
        await engine.dispose()


def _target(args: argparse.Namespace) -> str | None:
    """What the audit row names: the object acted on (a grant given names connection and grantee)."""
    if getattr(args, "grantee", None) is not None:
        return f"connection_id={args.connection_id},grantee={args.grantee}"
    target: str | None = getattr(args, "target", None)
    return target


def _group_row(view: dict[str, Any]) -> dict[str, Any]:
    members = [m["name"] + (" (no subject proof)" if m["subject_proof"] == "none" else "") for m in view["members"]]
    return {**view, "members": members}


def _grant_row(view: dict[str, Any]) -> dict[str, Any]:
    grantee = view["grantee"]
    return {**view, "grantee": f"{grantee['display_name']} ({grantee['id']})"}


def _command(work: Work, *, rows: Callable[[Any], list[dict[str, Any]]], columns: list[str]) -> Any:
    def run(args: argparse.Namespace) -> None:
        try:
            result = asyncio.run(_audited(work, args))
        except (InvalidRequest, Conflict, NotFound) as exc:
            raise CommandFailed(f"{exc.detail} ({exc.problem_code})", ExitCode.REFUSED) from None
        if args.json:
            print_json(result)
            return
        print_table(rows(result), columns)
        if isinstance(result, dict) and result.get("next_cursor"):
            print(f"(more: --cursor {result['next_cursor']})")

    return run


# ---- groups ----------------------------------------------------------------------------------------
async def _groups_list(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import groups, operators

    return [operators.group_view(g) for g in await groups.list_groups(session)]


async def _groups_show(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import groups, operators

    return operators.group_view(await groups.get_group(session, args.target))


async def _groups_create(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import groups, operators

    return operators.group_view(
        await groups.create_group(
            session,
            args.target,
            args.display_name or args.target,
            args.member or [],
            allow_unproven=args.allow_unproven,
        )
    )


async def _groups_change(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import groups, operators

    action = args.group_action
    if action == "set-members":
        allow = True if args.allow_unproven else None
        group = await groups.update_group(session, args.target, members=args.members, allow_unproven=allow)
    elif action == "add-members":
        group = await groups.add_members(session, args.target, args.members, allow_unproven=args.allow_unproven)
    elif action == "require-proof":
        group = await groups.update_group(session, args.target, allow_unproven=False)
    elif action == "remove-members":
        group = await groups.remove_members(session, args.target, args.members)
    elif action == "rename":
        group = await groups.update_group(session, args.target, display_name=args.display_name)
    else:
        group = await groups.delete_group(session, args.target)
    return operators.group_view(group)


# ---- grants ----------------------------------------------------------------------------------------
async def _grants_list(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import operators

    return await operators.list_grants(
        session,
        connection=args.connection,
        server_client=args.client,
        trust_group=args.group,
        live=args.live,
        cursor=args.cursor,
        limit=args.limit,
    )


async def _grants_give(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.crypto.vault import Vault
    from service.grants import operators
    from service.settings import Settings

    vault = Vault(Settings.from_env().keys)
    return await operators.give_grant(session, vault, args.connection_id, args.grantee, args.scope or [])


async def _grants_revoke(session: AsyncSession, args: argparse.Namespace) -> Any:
    from service.grants import operators

    return await operators.revoke_grant(session, args.target)


def _items(result: Any) -> list[dict[str, Any]]:
    items = result["items"] if isinstance(result, dict) and "items" in result else result
    return [_grant_row(v) for v in (items if isinstance(items, list) else [items])]


def _groups(result: Any) -> list[dict[str, Any]]:
    return [_group_row(v) for v in (result if isinstance(result, list) else [result])]


def _group_command(work: Work) -> Any:
    return _command(work, rows=_groups, columns=_GROUP_COLUMNS)


def _grant_command(work: Work) -> Any:
    return _command(work, rows=_items, columns=_GRANT_COLUMNS)


def register(subparsers: Any) -> None:
    def leaf(group: Any, name: str, operation: str, run: Any, help_text: str, target: str | None = None) -> Any:
        parser = group.add_parser(name, help=help_text)
        if target is not None:
            parser.add_argument("target", metavar=target)
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.set_defaults(func=run, operation=operation)
        return parser

    groups = subparsers.add_parser(
        "groups", help="trust groups: server clients the pages name as one party, sharing what users grant"
    ).add_subparsers(dest="groups_command", required=True)
    leaf(groups, "list", "cliListTrustGroups", _group_command(_groups_list), "list trust groups and their members")
    leaf(groups, "show", "cliGetTrustGroup", _group_command(_groups_show), "one trust group", target="GROUP")
    made = leaf(
        groups, "create", "cliCreateTrustGroup", _group_command(_groups_create), "create a trust group", target="NAME"
    )
    made.add_argument("--display-name", help="the party's name as pages show it (Example Corp)")
    made.add_argument("--member", action="append", help="a server client's name or sc_… id (repeatable)")
    unproven_help = (
        "allow members without subject proof (their API key alone names any user, so they read every grant "
        "of the group with it); flagged in every group answer and in /readyz"
    )
    made.add_argument("--allow-unproven", action="store_true", help=unproven_help)
    change = _group_command(_groups_change)
    for action, help_text in (
        ("set-members", "make these the only members"),
        ("add-members", "add members (a client is in one group at most)"),
        ("remove-members", "remove members: they lose the group's grants at once"),
    ):
        leaf(groups, action, "cliUpdateTrustGroup", change, help_text, target="GROUP").set_defaults(group_action=action)
        groups.choices[action].add_argument("members", nargs="+", metavar="MEMBER")
        if action != "remove-members":
            groups.choices[action].add_argument("--allow-unproven", action="store_true", help=unproven_help)
    leaf(
        groups,
        "require-proof",
        "cliUpdateTrustGroup",
        change,
        "stop allowing members without subject proof (refused while one is a member)",
        target="GROUP",
    ).set_defaults(group_action="require-proof")
    renamed = leaf(groups, "rename", "cliUpdateTrustGroup", change, "change the display name", target="GROUP")
    renamed.add_argument("display_name", metavar="DISPLAY_NAME")
    renamed.set_defaults(group_action="rename")
    leaf(
        groups, "delete", "cliDeleteTrustGroup", change, "delete a trust group and its grants", target="GROUP"
    ).set_defaults(group_action="delete")

    grants = subparsers.add_parser(
        "grants", help="which server clients (or trust groups) may use which connection"
    ).add_subparsers(dest="grants_command", required=True)
    lister = leaf(grants, "list", "cliListGrants", _grant_command(_grants_list), "list grants, oldest first")
    lister.add_argument("--connection", help="cn_… id")
    lister.add_argument("--client", help="server client name or sc_… id (its own grants)")
    lister.add_argument("--group", help="trust group name or tg_… id")
    lister.add_argument("--live", action="store_true", help="only grants not revoked")
    lister.add_argument("--cursor")
    lister.add_argument("--limit", type=int, default=50)
    give = leaf(
        grants,
        "give",
        "cliGiveGrant",
        _grant_command(_grants_give),
        "let a server client or trust group use a connection (audited)",
    )
    give.add_argument("connection_id", metavar="CONNECTION_ID")
    give.add_argument("grantee", metavar="GRANTEE", help="server client name, sc_… id, or tg_… id")
    give.add_argument("--scope", action="append", help="a scope it may use (repeatable)")
    leaf(
        grants,
        "revoke",
        "cliRevokeGrant",
        _grant_command(_grants_revoke),
        "revoke a grant: the grantee's next token request gets 404 not_connected",
        target="GRANT_ID",
    )
