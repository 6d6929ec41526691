"""``elicitd providers add|list|disable|enable|catalog``: third-party OAuth providers.

Secrets never go on the command line (shell history, ``ps``): ``--client-secret-env`` names an
environment variable, or ``--client-secret-stdin`` reads one line from standard input.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.cli_output import report
from service.connections.catalog import CATALOG
from service.crypto.vault import Vault
from service.errors import ConfigurationError, NotFound


async def _with_db(work: Callable[[AsyncSession, Vault], Awaitable[Any]]) -> Any:
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work
    from service.settings import Settings

    settings = Settings.from_env()
    engine = make_engine(settings)
    try:
        async with unit_of_work(make_sessionmaker(engine)) as session:
            return await work(session, Vault(settings.keys))
    finally:
        await engine.dispose()


def _secret(args: argparse.Namespace) -> str | None:
    if args.client_secret_env:
        value = os.environ.get(args.client_secret_env)
        if not value:
            raise ConfigurationError(f"environment variable {args.client_secret_env} is empty or not set")
        return value
    if args.client_secret_stdin:
        value = sys.stdin.readline().strip()
        if not value:
            raise ConfigurationError("no client secret on standard input")
        return value
    return None


def cmd_add(args: argparse.Namespace) -> None:
    from service.connections.discovery import MetadataCache
    from service.connections.providers import ProviderSpec, public_view, resolve, upsert_provider

    spec = ProviderSpec(
        name=args.name,
        client_id=args.client_id,
        client_secret=_secret(args),
        catalog=args.catalog,
        display_name=args.display_name,
        issuer=args.issuer,
        authorization_endpoint=args.authorization_endpoint,
        token_endpoint=args.token_endpoint,
        revocation_endpoint=args.revocation_endpoint,
        account_endpoint=args.account_endpoint,
        token_auth_method=args.token_auth_method,
        default_scopes=tuple(args.scope) if args.scope else None,
    )

    async def work(session: AsyncSession, vault: Vault) -> dict[str, Any]:
        row = await upsert_provider(session, spec, vault)
        if not args.no_discover:
            await resolve(row, vault, MetadataCache())  # fail now, not at the first user's connect
        return public_view(row)

    view = asyncio.run(_with_db(work))
    report(
        args.json,
        view,
        f"provider {view['name']} saved ({view['display_name']}, client {view['client_id']}); "
        f"redirect URI to register there: {_public_url()}/connect/callback",
    )


def _public_url() -> str:
    """This instance's public URL (``--dev`` sets it from the running ``elicitd dev``), or the
    variable's name for the operator to fill in when it is not set here."""
    return os.environ.get("ELICITD_PUBLIC_URL", "").rstrip("/") or "<ELICITD_PUBLIC_URL>"


def cmd_list(args: argparse.Namespace) -> None:
    from service.cli_output import print_table
    from service.connections.providers import list_providers, public_view

    async def work(session: AsyncSession, vault: Vault) -> list[dict[str, Any]]:
        return [public_view(row) for row in await list_providers(session)]

    print_table(
        asyncio.run(_with_db(work)),
        ["name", "display_name", "catalog", "client_id", "has_client_secret", "default_scopes", "enabled"],
        as_json=args.json,
    )


def cmd_catalog(args: argparse.Namespace) -> None:
    from service.cli_output import print_table

    rows = [
        {
            "catalog": e.key,
            "display_name": e.display_name,
            "default_scopes": " ".join(e.default_scopes),
            "needs": "client id, secret" + (", issuer" if e.needs_issuer or (e.key == "oauth2") else ""),
        }
        for e in CATALOG.values()
    ]
    print_table(rows, ["catalog", "display_name", "default_scopes", "needs"], as_json=args.json)


def _set_enabled(enabled: bool) -> Callable[[argparse.Namespace], None]:
    def command(args: argparse.Namespace) -> None:
        from service.connections.providers import set_enabled

        async def work(session: AsyncSession, vault: Vault) -> bool:
            return await set_enabled(session, args.name, enabled)

        if not asyncio.run(_with_db(work)):
            raise NotFound(f"no provider {args.name}")
        report(
            args.json,
            {"name": args.name, "enabled": enabled},
            f"provider {args.name} {'enabled' if enabled else 'disabled'}",
        )

    return command


def register(subparsers: Any) -> None:
    providers = subparsers.add_parser("providers", help="third-party OAuth providers users connect accounts at")
    sub = providers.add_subparsers(dest="providers_command", required=True)
    add = sub.add_parser("add", help="add or replace a provider (a catalog entry needs only id and secret)")
    add.add_argument("name", help="the name MCP servers use, e.g. github")
    add.add_argument("--catalog", choices=sorted(CATALOG), help="catalog entry (default: the name, else oauth2)")
    add.add_argument("--client-id", required=True)
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--client-secret-env", help="name of an environment variable holding the client secret")
    secret.add_argument("--client-secret-stdin", action="store_true", help="read the client secret from stdin")
    add.add_argument("--display-name")
    add.add_argument("--issuer", help="issuer URL (endpoints are discovered from it)")
    add.add_argument("--authorization-endpoint")
    add.add_argument("--token-endpoint")
    add.add_argument("--revocation-endpoint")
    add.add_argument("--account-endpoint", help="JSON endpoint naming the account (id and login)")
    add.add_argument("--token-auth-method", choices=["client_secret_basic", "client_secret_post", "none"])
    add.add_argument("--scope", action="append", help="default scope (repeatable)")
    add.add_argument("--no-discover", action="store_true", help="save without checking discovery now")
    add.add_argument("--json", action="store_true")
    add.set_defaults(func=cmd_add)
    listing = sub.add_parser("list", help="list providers (secrets are never shown)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    catalog = sub.add_parser("catalog", help="the built-in catalog of well-known providers")
    catalog.add_argument("--json", action="store_true")
    catalog.set_defaults(func=cmd_catalog)
    for name, enabled in (("disable", False), ("enable", True)):
        parser = sub.add_parser(name, help=f"{name} a provider (existing connections are kept)")
        parser.add_argument("name")
        parser.add_argument("--json", action="store_true")
        parser.set_defaults(func=_set_enabled(enabled))
