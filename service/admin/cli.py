# size: the whole `elicitd admin` tree in one table, one small handler per admin API operation beside it
"""``elicitd admin …``: every admin operation from a shell.

The CLI talks to PostgreSQL directly (``ELICITD_DATABASE_URL`` and ``ELICITD_KEYS`` as for
``serve``), running the very functions behind the admin API, so it works before any admin token
exists (that is how the first one is made) and while the HTTP side is down. Flow cancels and
expiries still publish the Redis wake-up when ``ELICITD_REDIS_URL`` is set. Each command writes an
audit row with actor ``cli``. Output is a readable table (a ``show`` prints its fields as a
two-column table, then its lists as tables); ``--json`` prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from service.admin.cli_audit import register_audit
from service.admin.cli_brands import register_brands
from service.admin.cli_directory import register_directory
from service.admin.cli_endpoints import register_endpoints
from service.admin_mcp.cli import register as register_mcp
from service.cli_output import print_document, print_json, print_table
from service.db import audit
from service.db.unit import unit_of_work

if TYPE_CHECKING:
    from service.admin.deps import AdminServices

Handler = Callable[[Any, argparse.Namespace], Awaitable[Any]]


# What the composition root hands these commands: opening the started services (no web app), so
# flow cancels and expiries still wake waiters through Redis. ``service.cli`` passes it to
# ``register``; a command never opens the whole service itself.
OpenServices = Callable[[], contextlib.AbstractAsyncContextManager["AdminServices"]]


async def audited(open_services: OpenServices, handler: Handler, args: argparse.Namespace) -> Any:
    """Run ``handler`` on the services and write its audit row (``service.db.audit``)."""
    async with open_services() as state:
        return await audit.audited(
            state.sessions,
            args.operation,
            lambda: handler(state, args),
            target=lambda: getattr(args, "target", None),
        )


def _builtins(value: Any) -> Any:
    if isinstance(value, list):
        return [_builtins(v) for v in value]
    return msgspec.to_builtins(value) if isinstance(value, msgspec.Struct) else value


def _command(
    open_services: OpenServices,
    handler: Handler,
    columns: list[str] | None,
    *,
    rows: Callable[[Any], Any] | None = None,
    after: Callable[[Any], None] | None = None,
    show: Callable[[Any], None] = print_document,
) -> Callable[[argparse.Namespace], None]:
    """A command printing ``columns`` of its rows as a table, or (``columns=None``, the ``show``
    commands) one object through ``show``; ``--json`` prints the whole result instead."""

    def run(args: argparse.Namespace) -> None:
        result = _builtins(asyncio.run(audited(open_services, handler, args)))
        shown = rows(result) if rows is not None else result
        if args.json:
            print_json(result)
        elif columns is None:
            show(shown)
        else:
            print_table(shown if isinstance(shown, list) else [shown], columns)
            if isinstance(result, dict) and result.get("next_cursor"):
                print(f"(more: --cursor {result['next_cursor']})")
        if after is not None and not args.json:
            after(result)

    return run


def _once(label: str, key: str) -> Callable[[Any], None]:
    def show(result: Any) -> None:
        if result.get(key):
            print(f"{label} (shown once, store it now): {result[key]}")

    return show


# ---- handlers -------------------------------------------------------------------------------------
async def _tokens_create(state: Any, args: argparse.Namespace) -> dict[str, Any]:
    from service.admin import tokens

    async with unit_of_work(state.sessions) as session:
        created = await tokens.create_token(
            session, name=args.name, role=tokens.Role.parse(args.role), lifetime=tokens.parse_lifetime(args.expires_in)
        )
    return {**_token_row(created.token), "token": created.secret}


def _token_row(row: Any) -> dict[str, Any]:
    from service.admin.tokens import ADMIN_TOKEN_ID

    return {
        "id": ADMIN_TOKEN_ID.format(row.id),
        "name": row.name,
        "role": row.role,
        "prefix": row.prefix,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "revoked_at": row.revoked_at,
        "last_used_at": row.last_used_at,
    }


async def _tokens_list(state: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    from service.admin import tokens

    async with state.sessions() as session:
        return [_token_row(t) for t in await tokens.list_tokens(session)]


async def _tokens_revoke(state: Any, args: argparse.Namespace) -> dict[str, Any]:
    from service.admin import tokens

    async with unit_of_work(state.sessions) as session:
        row = await tokens.revoke_token(session, args.target)
    return _token_row(row)


def _when(raw: str | None) -> datetime | None:
    return None if raw is None else datetime.fromisoformat(raw)


async def _flows_list(state: Any, args: argparse.Namespace) -> Any:
    from service.admin import flows

    filters = flows.FlowFilters(
        status=args.status,
        kind=args.kind,
        server_client=args.client,
        provider=args.provider,
        subject_iss=args.iss,
        subject_sub=args.sub,
        created_after=_when(args.created_after),
        created_before=_when(args.created_before),
        expires_after=_when(args.expires_after),
        expires_before=_when(args.expires_before),
    )
    async with state.sessions() as session:
        return await flows.list_flows(session, filters, cursor=args.cursor, limit=args.limit)


async def _flows_show(state: Any, args: argparse.Namespace) -> Any:
    from service.admin import flows

    async with state.sessions() as session:
        return await flows.show_flow(state.flows, session, args.target)


def _finish(status: str) -> Handler:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import flows
        from service.admin.views import flow_view
        from service.flows.states import FlowStatus

        return flow_view(await flows.finish_flow(state.flows, args.target, FlowStatus(status), admin_token=None))

    return run


def _clients(op: str) -> Handler:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import clients
        from service.admin.schemas import CreateServerClient, UpdateServerClient
        from service.admin.tokens import parse_lifetime

        async with unit_of_work(state.sessions) as session:
            if op not in {"list", "create"}:
                # A name or an id, as `elicitd servers …` takes them; the id is what gets audited.
                args.target = await clients.public_id_of(session, args.target)
            if op == "list":
                return await clients.list_clients(session, cursor=args.cursor, limit=args.limit)
            if op == "show":
                return await clients.show(session, args.target)
            if op == "create":
                data = msgspec.convert(
                    {
                        "name": args.target,
                        "display_name": args.display_name,
                        "allowed_providers": args.provider or [],
                        "trusted_issuers": args.issuer or [],
                        "flows_per_minute": args.flows_per_minute,
                        "pending_per_subject": args.pending_per_subject,
                        "subject_proof": args.subject_proof,
                        "resource_uris": args.resource_uri or [],
                    },
                    CreateServerClient,
                )
                result: Any = await clients.create(session, data)
            elif op in {"disable", "enable"}:
                result = await clients.set_disabled(session, args.target, op == "disable")
            elif op == "rotate-key":
                result = await clients.rotate_key(
                    session,
                    args.target,
                    timedelta(seconds=0 if args.grace in {"0", "0s"} else parse_lifetime(args.grace).total_seconds()),
                )
            elif op == "set-webhook":
                result = await clients.set_webhook(
                    session, state.vault, args.target, None if args.clear else args.url, args.event
                )
            elif op == "rotate-webhook-secret":
                result = await clients.rotate_webhook_secret(session, state.vault, args.target)
            else:
                result = await clients.update_client(
                    session, args.target, msgspec.convert(_update_fields(op, args), UpdateServerClient)
                )
            return result

    return run


def _update_fields(op: str, args: argparse.Namespace) -> dict[str, Any]:
    if op == "set-providers":
        return {"allowed_providers": args.values}
    if op == "set-issuers":
        return {"trusted_issuers": args.values}
    fields: dict[str, Any] = {}
    for name in ("flows_per_minute", "pending_per_subject"):
        raw = getattr(args, name)
        if raw is not None:
            fields[name] = None if raw == "none" else int(raw)
    return fields


def _webhooks(op: str) -> Handler:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import deliveries

        async with unit_of_work(state.sessions) as session:
            if op == "list":
                return await deliveries.list_deliveries(
                    session,
                    state=args.state,
                    server_client=args.client,
                    flow=args.flow,
                    cursor=args.cursor,
                    limit=args.limit,
                )
            if op == "show":
                return await deliveries.show_delivery(session, args.target)
            return await deliveries.replay(session, args.target)

    return run


async def _stats(state: Any, args: argparse.Namespace) -> Any:
    from service.admin import flows

    async with state.sessions() as session:
        return await flows.stats(session, flows.parse_window(args.window), server_client=args.server_client)


# ---- parser ---------------------------------------------------------------------------------------
_FLOW_COLUMNS = ["id", "kind", "status", "server_client", "provider", "created_at", "expires_at"]
_CLIENT_COLUMNS = ["id", "name", "display_name", "disabled", "webhook_url", "flows_per_minute", "pending_per_subject"]
_HOOK_COLUMNS = ["id", "flow_id", "event_type", "state", "attempts", "last_status", "next_attempt_at"]
# `show` is about one delivery, so it also says why the last attempt failed.
_HOOK_DETAIL_COLUMNS = [*_HOOK_COLUMNS, "last_error"]


def _items(result: Any) -> Any:
    return result["items"]


def _client(result: Any) -> Any:
    return result.get("client", result)


def _show_flow(result: Any) -> None:
    """A flow's fields, then its history and its webhook deliveries, each as a table."""
    print_document(
        {**result["flow"], "events": result["events"], "webhooks": result["webhooks"]},
        {"events": ["id", "at", "type", "actor", "from_status", "to_status", "detail"], "webhooks": _HOOK_COLUMNS},
    )


def _stats_rows(result: Any) -> Any:
    return result["providers"]


def register(subparsers: Any, open_services: OpenServices) -> None:  # noqa: PLR0915 - one flat table of subcommands
    command = functools.partial(_command, open_services)
    admin = subparsers.add_parser(
        "admin",
        help="operate elicitd: tokens, flows, clients, webhooks, stats, providers, issuers, connections, payments",
    )
    groups = admin.add_subparsers(dest="admin_group", required=True)

    def leaf(
        group: Any,
        name: str,
        operation: str,
        run: Callable[[argparse.Namespace], None],
        target: str | None = None,
        paged: bool = False,
    ) -> Any:
        parser = group.add_parser(name)
        if target:
            parser.add_argument("target", metavar=target)
        if paged:
            parser.add_argument("--cursor")
            parser.add_argument("--limit", type=int, default=50)
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.set_defaults(func=run, operation=operation)
        return parser

    tokens = groups.add_parser("tokens", help="admin tokens").add_subparsers(dest="admin_cmd", required=True)
    create = leaf(
        tokens,
        "create",
        "cliCreateAdminToken",
        command(_tokens_create, ["id", "name", "role", "expires_at"], after=_once("Admin token", "token")),
    )
    create.add_argument("--name", required=True)
    create.add_argument("--role", choices=["viewer", "operator", "admin"], required=True)
    create.add_argument("--expires-in", default="90d", help="lifetime: 90d, 12h, 30m (at most 366d)")
    leaf(
        tokens,
        "list",
        "cliListAdminTokens",
        command(_tokens_list, ["id", "name", "role", "prefix", "expires_at", "revoked_at", "last_used_at"]),
    )
    leaf(
        tokens,
        "revoke",
        "cliRevokeAdminToken",
        command(_tokens_revoke, ["id", "name", "role", "revoked_at"]),
        target="TOKEN_ID",
    )

    flows = groups.add_parser("flows", help="flows").add_subparsers(dest="admin_cmd", required=True)
    lister = leaf(flows, "list", "adminListFlows", command(_flows_list, _FLOW_COLUMNS, rows=_items), paged=True)
    for option in (
        "status",
        "kind",
        "client",
        "provider",
        "iss",
        "sub",
        "created-after",
        "created-before",
        "expires-after",
        "expires-before",
    ):
        lister.add_argument(f"--{option}")
    leaf(flows, "show", "adminGetFlow", command(_flows_show, None, show=_show_flow), target="FLOW_ID")
    leaf(flows, "cancel", "adminCancelFlow", command(_finish("cancelled"), _FLOW_COLUMNS), target="FLOW_ID")
    leaf(flows, "expire", "adminExpireFlow", command(_finish("expired"), _FLOW_COLUMNS), target="FLOW_ID")

    clients = groups.add_parser("clients", help="server clients").add_subparsers(dest="admin_cmd", required=True)
    made = leaf(
        clients,
        "create",
        "adminCreateServerClient",
        command(_clients("create"), _CLIENT_COLUMNS, rows=_client, after=_once("API key", "api_key")),
        target="NAME",
    )
    made.add_argument("--display-name")
    made.add_argument("--provider", action="append")
    made.add_argument("--issuer", action="append")
    made.add_argument("--flows-per-minute", type=int)
    made.add_argument("--pending-per-subject", type=int)
    made.add_argument(
        "--subject-proof",
        choices=["required", "none"],
        default="required",
        help="require the user's access token in Elicitd-Subject-Token on calls naming a user (default: required)",
    )
    made.add_argument(
        "--resource-uri", action="append", help="a resource URI the user's tokens are issued for (RFC 8707)"
    )
    leaf(clients, "list", "adminListServerClients", command(_clients("list"), _CLIENT_COLUMNS, rows=_items), paged=True)
    leaf(clients, "show", "adminGetServerClient", command(_clients("show"), None), target="CLIENT")
    leaf(
        clients,
        "disable",
        "adminDisableServerClient",
        command(_clients("disable"), _CLIENT_COLUMNS),
        target="CLIENT",
    )
    leaf(clients, "enable", "adminEnableServerClient", command(_clients("enable"), _CLIENT_COLUMNS), target="CLIENT")
    rotate = leaf(
        clients,
        "rotate-key",
        "adminRotateServerClientKey",
        command(_clients("rotate-key"), _CLIENT_COLUMNS, rows=_client, after=_once("API key", "api_key")),
        target="CLIENT",
    )
    rotate.add_argument("--grace", default="24h", help="how long older keys keep working (0 = now)")
    for name, operation in (("set-providers", "adminUpdateServerClient"), ("set-issuers", "adminUpdateServerClient")):
        leaf(clients, name, operation, command(_clients(name), _CLIENT_COLUMNS), target="CLIENT").add_argument(
            "values", nargs="*", help="the complete list (none = every provider / issuer)"
        )
    limits = leaf(
        clients,
        "set-limits",
        "adminUpdateServerClient",
        command(_clients("set-limits"), _CLIENT_COLUMNS),
        target="CLIENT",
    )
    limits.add_argument("--flows-per-minute", help="a number, or 'none'")
    limits.add_argument("--pending-per-subject", help="a number, or 'none'")
    hook = leaf(
        clients,
        "set-webhook",
        "adminSetServerClientWebhook",
        command(
            _clients("set-webhook"),
            _CLIENT_COLUMNS,
            rows=_client,
            after=_once("Webhook signing secret", "webhook_secret"),
        ),
        target="CLIENT",
    )
    hook.add_argument("url", nargs="?")
    hook.add_argument("--clear", action="store_true")
    hook.add_argument("--event", action="append", help="an event type to deliver (repeat; default: every type)")
    leaf(
        clients,
        "rotate-webhook-secret",
        "adminRotateWebhookSecret",
        command(
            _clients("rotate-webhook-secret"),
            _CLIENT_COLUMNS,
            rows=_client,
            after=_once("Webhook signing secret", "webhook_secret"),
        ),
        target="CLIENT",
    )

    hooks = groups.add_parser("webhooks", help="completion webhooks").add_subparsers(dest="admin_cmd", required=True)
    hook_list = leaf(
        hooks, "list", "adminListWebhookDeliveries", command(_webhooks("list"), _HOOK_COLUMNS, rows=_items), paged=True
    )
    hook_list.add_argument("--state", choices=["pending", "in_flight", "delivered", "abandoned"])
    hook_list.add_argument("--client")
    hook_list.add_argument("--flow")
    leaf(hooks, "show", "adminGetWebhookDelivery", command(_webhooks("show"), _HOOK_DETAIL_COLUMNS), target="EVENT_ID")
    leaf(hooks, "replay", "adminReplayWebhookDelivery", command(_webhooks("replay"), _HOOK_COLUMNS), target="EVENT_ID")
    register_endpoints(hooks, leaf, command)

    stats = leaf(
        groups,
        "stats",
        "adminStats",
        command(
            _stats,
            ["provider", "created", "completed", "completion_rate", "median_seconds_to_complete"],
            rows=_stats_rows,
        ),
    )
    stats.add_argument("--window", default="24h")
    stats.add_argument("--server-client", help="only this server client's flows and webhook backlog (sc_…)")
    register_audit(groups, leaf, command, lambda handler, args: audited(open_services, handler, args))
    register_directory(groups, leaf, command)
    register_brands(groups, leaf, command)
    register_mcp(groups, open_services)
