"""``elicitd issuers add|list|disable|enable``: trusted OIDC issuers for the browser login."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.cli_output import report
from service.crypto.vault import Vault
from service.errors import ConfigurationError, NotFound
from service.identity.issuers import DEFAULT_SCOPES, IssuerConfig, IssuerDirectory


async def _with_db(work: Callable[[AsyncSession, Vault, IssuerDirectory], Awaitable[Any]]) -> Any:
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work
    from service.settings import Settings

    settings = Settings.from_env()
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    vault = Vault(settings.keys)
    directory = IssuerDirectory(sessions, vault)
    try:
        async with unit_of_work(sessions) as session:
            return await work(session, vault, directory)
    finally:
        await directory.close()
        await engine.dispose()


def cmd_add(args: argparse.Namespace) -> None:
    from service.identity.issuers import upsert_issuer

    secret = None
    if args.client_secret_env:
        secret = os.environ.get(args.client_secret_env)
        if not secret:
            raise ConfigurationError(f"environment variable {args.client_secret_env} is empty or not set")
    introspection_secret = None
    if args.introspection_secret_env:
        introspection_secret = os.environ.get(args.introspection_secret_env)
        if not introspection_secret:
            raise ConfigurationError(f"environment variable {args.introspection_secret_env} is empty or not set")
    config = IssuerConfig(
        issuer=args.issuer,
        client_id=args.client_id,
        client_secret=secret,
        display_name=args.display_name,
        scopes=tuple(args.scope or DEFAULT_SCOPES),
        authorization_endpoint=args.authorization_endpoint,
        token_endpoint=args.token_endpoint,
        jwks_uri=args.jwks_uri,
        introspection_endpoint=args.introspection_endpoint,
        introspection_client_id=args.introspection_client_id,
        introspection_client_secret=introspection_secret,
    ).validated()

    async def work(session: AsyncSession, vault: Vault, directory: IssuerDirectory) -> None:
        explicit = config.authorization_endpoint and config.token_endpoint and config.jwks_uri
        if not explicit and not args.no_discover:
            await directory.discover(config.issuer)  # fail now, not at the first user's login
        await upsert_issuer(session, vault, config)

    asyncio.run(_with_db(work))
    report(
        args.json,
        {"issuer": config.issuer, "client_id": config.client_id, "confidential": bool(secret)},
        f"issuer {config.issuer} saved ({'confidential' if secret else 'public'} client {config.client_id})",
    )


def cmd_list(args: argparse.Namespace) -> None:
    from service.cli_output import print_table
    from service.identity.issuers import issuer_public_view, list_issuers

    async def work(session: AsyncSession, vault: Vault, directory: IssuerDirectory) -> list[dict[str, Any]]:
        return [issuer_public_view(row) for row in await list_issuers(session)]

    rows = asyncio.run(_with_db(work))
    print_table(
        rows, ["issuer", "display_name", "client_id", "client_secret", "enabled", "endpoints"], as_json=args.json
    )


def _set_enabled(enabled: bool) -> Callable[[argparse.Namespace], None]:
    def command(args: argparse.Namespace) -> None:
        from service.identity.issuers import set_enabled

        async def work(session: AsyncSession, vault: Vault, directory: IssuerDirectory) -> bool:
            return await set_enabled(session, args.issuer, enabled)

        if not asyncio.run(_with_db(work)):
            raise NotFound(f"no issuer {args.issuer}")
        report(
            args.json,
            {"issuer": args.issuer, "enabled": enabled},
            f"issuer {args.issuer} {'enabled' if enabled else 'disabled'}",
        )

    return command


def register(subparsers: Any) -> None:
    issuers = subparsers.add_parser("issuers", help="trusted OIDC issuers (where browser users log in)")
    sub = issuers.add_subparsers(dest="issuers_command", required=True)
    add = sub.add_parser("add", help="add or update an issuer (discovers its metadata unless endpoints are given)")
    add.add_argument("--issuer", required=True, help="issuer URL, exactly as in its tokens' 'iss'")
    add.add_argument("--client-id", required=True)
    add.add_argument("--client-secret-env", help="name of an environment variable holding the client secret")
    add.add_argument("--display-name")
    add.add_argument("--scope", action="append", help="scope to request (repeatable; default openid)")
    add.add_argument("--authorization-endpoint")
    add.add_argument("--token-endpoint")
    add.add_argument("--jwks-uri")
    add.add_argument("--introspection-client-id", help="elicitd's client id at the RFC 7662 endpoint (opaque tokens)")
    add.add_argument("--introspection-secret-env", help="name of an environment variable holding its secret")
    add.add_argument("--introspection-endpoint", help="default: introspection_endpoint from the issuer's metadata")
    add.add_argument("--no-discover", action="store_true", help="save without checking discovery now")
    add.add_argument("--json", action="store_true")
    add.set_defaults(func=cmd_add)
    listing = sub.add_parser("list", help="list issuers (secrets are never shown)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    for name, enabled in (("disable", False), ("enable", True)):
        detail = " (ends its browser sessions at once)" if not enabled else ""
        parser = sub.add_parser(name, help=f"{name} an issuer{detail}")
        parser.add_argument("issuer")
        parser.add_argument("--json", action="store_true")
        parser.set_defaults(func=_set_enabled(enabled))
