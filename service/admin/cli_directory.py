"""``elicitd admin providers|issuers|connections|payments …``: the CLI side of ``api_directory``.

Same functions as the API, same audit rows (actor ``cli``). A client secret is never an argument
(it would show in ``ps`` and shell history): ``--client-secret-env NAME`` reads it from an
environment variable, ``--client-secret-stdin`` from the first line of standard input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from service.connections.providers import ADDRESS_FIELDS
from service.db.unit import unit_of_work
from service.errors import InvalidRequest

Leaf = Callable[..., Any]
Command = Callable[..., Callable[[argparse.Namespace], None]]

_PROVIDER_COLUMNS = ["name", "display_name", "catalog", "client_id", "client_secret_set", "enabled"]
_ISSUER_COLUMNS = ["issuer", "display_name", "client_id", "client_secret_set", "enabled"]
_DISCOVERY_COLUMNS = ["ok", "error_code", "authorization_endpoint", "token_endpoint"]
_CONNECTION_COLUMNS = ["id", "provider", "account_login", "status", "health", "expires_at", "refreshed_at"]
_PAYMENT_COLUMNS = ["flow_id", "provider", "amount", "currency", "status", "settled_by", "updated_at"]

# option → field, for providers and issuers (``--scope`` repeats).
_PROVIDER_OPTIONS = [
    "catalog",
    "display_name",
    *ADDRESS_FIELDS,
    "account_id_field",
    "account_login_field",
    "token_auth_method",
]
_ISSUER_OPTIONS = ["display_name", "authorization_endpoint", "token_endpoint", "jwks_uri"]


def _convert(raw: dict[str, Any], kind: type[Any]) -> Any:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc)) from None


def _secret(args: argparse.Namespace) -> str | None:
    if getattr(args, "client_secret_env", None):
        value = os.environ.get(args.client_secret_env)
        if not value:
            raise InvalidRequest(f"environment variable {args.client_secret_env} is not set")
        return value
    if getattr(args, "client_secret_stdin", False):
        value = sys.stdin.readline().rstrip("\r\n")
        if not value:
            raise InvalidRequest("no client secret on standard input")
        return value
    return None


def _body(args: argparse.Namespace, options: list[str], scope_field: str) -> dict[str, Any]:
    body: dict[str, Any] = {name: getattr(args, name) for name in options if getattr(args, name) is not None}
    if args.scope:
        body[scope_field] = args.scope
    if args.client_id is not None:
        body["client_id"] = args.client_id
    secret = _secret(args)
    if secret is not None:
        body["client_secret"] = secret
    elif getattr(args, "clear_client_secret", False):
        body["client_secret"] = None
    if args.enabled is not None:
        body["enabled"] = args.enabled
    return body


def _providers(op: str) -> Any:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import directory
        from service.connections import providers

        if op == "test-discovery":  # an outbound fetch: no transaction open around it
            return await directory.check_provider_discovery(state.read_sessions, state.vault, state.http, args.target)
        async with unit_of_work(state.sessions) as session:
            if op == "list":
                return [directory.provider_view(p) for p in await providers.list_providers(session)]
            if op == "show":
                return directory.provider_view(await directory.get_provider(session, args.target))
            if op == "create":
                body = {**_body(args, _PROVIDER_OPTIONS, "default_scopes"), "name": args.target}
                result: Any = await directory.create_provider(
                    session, state.vault, _convert(body, directory.CreateProvider)
                )
            elif op == "update":
                result = await directory.update_provider(
                    session,
                    state.vault,
                    args.target,
                    _convert(_body(args, _PROVIDER_OPTIONS, "default_scopes"), directory.UpdateProvider),
                )
            else:
                result = await directory.set_provider_enabled(session, args.target, op == "enable")
            return result

    return run


def _issuers(op: str) -> Any:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import directory
        from service.identity import issuers

        if op == "test-discovery":  # an outbound fetch: no transaction open around it
            return await directory.check_issuer_discovery(state.read_sessions, state.issuers, args.target)
        async with unit_of_work(state.sessions) as session:
            if op == "list":
                return [directory.issuer_view(i) for i in await issuers.list_issuers(session)]
            if op == "create":
                body = {**_body(args, _ISSUER_OPTIONS, "scopes"), "issuer": args.target}
                result: Any = await directory.create_issuer(
                    session, state.vault, _convert(body, directory.CreateIssuer)
                )
            elif op == "update":
                body = {**_body(args, _ISSUER_OPTIONS, "scopes"), "issuer": args.target}
                result = await directory.update_issuer(session, state.vault, _convert(body, directory.UpdateIssuer))
            else:
                result = await directory.set_issuer_enabled(session, args.target, op == "enable")
            return result

    return run


def _connections(op: str) -> Any:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import connections

        if op == "revoke":
            return await connections.revoke_connection(state.connections, args.target)
        if op == "refresh":
            return await connections.refresh_connection(state.connections, args.target)
        if op == "reconnect-link":
            from service.admin import reconnect_links

            return await reconnect_links.reconnect_link(state.read_sessions, state.flows, args.target)
        async with state.sessions() as session:
            if op == "list":
                return await connections.list_connections(
                    session,
                    provider=args.provider,
                    subject_iss=args.iss,
                    subject_sub=args.sub,
                    status=args.status,
                    health=args.health,
                    cursor=args.cursor,
                    limit=args.limit,
                )
            return await connections.show_connection(session, args.target)

    return run


def _payments(op: str) -> Any:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        from service.admin import payments

        if op == "reconcile":
            return await payments.reconcile_payment(state, args.target)
        async with state.sessions() as session:
            if op == "list":
                return await payments.list_payments(
                    session, status=args.status, provider=args.provider, cursor=args.cursor, limit=args.limit
                )
            return await payments.show_payment(session, args.target)

    return run


def _secret_options(parser: Any, *, update: bool) -> None:
    parser.add_argument("--client-id", required=not update)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--client-secret-env", metavar="VAR", help="read the client secret from this variable")
    group.add_argument("--client-secret-stdin", action="store_true", help="read the client secret from stdin")
    if update:
        group.add_argument("--clear-client-secret", action="store_true", help="make it a public client")
    parser.add_argument("--scope", action="append", help="repeat for each scope (the complete list)")
    state = parser.add_mutually_exclusive_group()
    state.add_argument("--enabled", dest="enabled", action="store_const", const=True)
    state.add_argument("--disabled", dest="enabled", action="store_const", const=False)


def _with(key: str, *extra: str) -> Callable[[Any], Any]:
    """Flatten ``{"connection": {...}, "revoked": …}`` into one table row."""

    def rows(result: Any) -> Any:
        return {**result[key], **{name: result[name] for name in extra}}

    return rows


def _items(result: Any) -> Any:
    return result["items"]


def register_directory(groups: Any, leaf: Leaf, command: Command) -> None:
    provs = groups.add_parser("providers", help="third-party OAuth providers").add_subparsers(
        dest="admin_cmd", required=True
    )
    leaf(provs, "list", "adminListProviders", command(_providers("list"), _PROVIDER_COLUMNS))
    leaf(provs, "show", "adminGetProvider", command(_providers("show"), None), target="NAME")
    for name, operation in (("create", "adminCreateProvider"), ("update", "adminUpdateProvider")):
        parser = leaf(provs, name, operation, command(_providers(name), _PROVIDER_COLUMNS), target="NAME")
        _secret_options(parser, update=name == "update")
        for option in _PROVIDER_OPTIONS:
            parser.add_argument("--" + option.replace("_", "-"))
    for name, operation in (("disable", "adminDisableProvider"), ("enable", "adminEnableProvider")):
        leaf(provs, name, operation, command(_providers(name), _PROVIDER_COLUMNS), target="NAME")
    leaf(
        provs,
        "test-discovery",
        "adminTestProviderDiscovery",
        command(_providers("test-discovery"), _DISCOVERY_COLUMNS),
        target="NAME",
    )

    iss = groups.add_parser("issuers", help="trusted identity issuers").add_subparsers(dest="admin_cmd", required=True)
    leaf(iss, "list", "adminListIssuers", command(_issuers("list"), _ISSUER_COLUMNS))
    for name, operation in (("create", "adminCreateIssuer"), ("update", "adminUpdateIssuer")):
        parser = leaf(iss, name, operation, command(_issuers(name), _ISSUER_COLUMNS), target="ISSUER")
        _secret_options(parser, update=name == "update")
        for option in _ISSUER_OPTIONS:
            parser.add_argument("--" + option.replace("_", "-"))
    for name, operation in (("disable", "adminDisableIssuer"), ("enable", "adminEnableIssuer")):
        leaf(iss, name, operation, command(_issuers(name), _ISSUER_COLUMNS), target="ISSUER")
    leaf(
        iss,
        "test-discovery",
        "adminTestIssuerDiscovery",
        command(_issuers("test-discovery"), _DISCOVERY_COLUMNS),
        target="ISSUER",
    )

    conns = groups.add_parser("connections", help="connections (token vault)").add_subparsers(
        dest="admin_cmd", required=True
    )
    lister = leaf(
        conns,
        "list",
        "adminListConnections",
        command(_connections("list"), _CONNECTION_COLUMNS, rows=_items),
        paged=True,
    )
    for option in ("provider", "iss", "sub", "status", "health"):
        lister.add_argument(f"--{option}")
    leaf(conns, "show", "adminGetConnection", command(_connections("show"), None), target="CONNECTION_ID")
    leaf(
        conns,
        "revoke",
        "adminRevokeConnection",
        command(
            _connections("revoke"),
            [*_CONNECTION_COLUMNS[:4], "revoked", "revoked_at_provider"],
            rows=_with("connection", "revoked", "revoked_at_provider"),
        ),
        target="CONNECTION_ID",
    )
    leaf(
        conns,
        "refresh",
        "adminRefreshConnection",
        command(_connections("refresh"), _CONNECTION_COLUMNS),
        target="CONNECTION_ID",
    )
    leaf(
        conns,
        "reconnect-link",
        "adminReconnectLink",
        command(_connections("reconnect-link"), ["connection_id", "url", "expires_at"]),
        target="CONNECTION_ID",
    )

    pays = groups.add_parser("payments", help="payments").add_subparsers(dest="admin_cmd", required=True)
    lister = leaf(
        pays, "list", "adminListPayments", command(_payments("list"), _PAYMENT_COLUMNS, rows=_items), paged=True
    )
    lister.add_argument("--status")
    lister.add_argument("--provider")
    leaf(pays, "show", "adminGetPayment", command(_payments("show"), None), target="FLOW_ID")
    leaf(
        pays,
        "reconcile",
        "adminReconcilePayment",
        command(
            _payments("reconcile"),
            ["flow_id", "status", "provider_status", "outcome"],
            rows=_with("payment", "provider_status", "outcome"),
        ),
        target="FLOW_ID",
    )
