"""The ``elicitd`` command.

``serve`` runs the app against configured PostgreSQL/Redis; ``dev`` does the same on embedded ones
under ``.data/`` (what ``make run`` calls); ``migrate`` applies Alembic migrations; ``servers``
manages server clients; ``keys`` makes and rotates keys. Domains add their own subcommands
through ``register`` functions listed in ``_COMMAND_GROUPS``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from service.errors import ConfigurationError, ElicitdError
from service.settings import KeyRing, Settings

DATA_DIR = Path(os.environ.get("ELICITD_DATA_DIR", ".data"))

# Modules with a ``register(subparsers)`` function adding their own subcommands.
_COMMAND_GROUPS: list[str] = [
    "service.identity.cli",
    "service.admin.cli",
    "service.payments.cli",
    "service.apikeys.cli",
    "service.connections.cli",
]


def _settings() -> Settings:
    return Settings.from_env()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, as_json: bool = False) -> None:
    """Readable columns for people, ``--json`` (one document) for scripts."""
    if as_json:
        print(json.dumps(list(rows), default=str, indent=2))
        return
    if not rows:
        print("(none)")
        return
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


# ---- serve / dev / migrate -------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from service.app import create_app
    from service.logs import configure_logging
    from service.services import build_services
    from service.serving import uvicorn_options

    settings = _settings()
    configure_logging(settings)
    if args.migrate:
        from service.db.migrate import upgrade

        upgrade(settings.database_url)
    uvicorn.run(
        create_app(build_services(settings)),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        **uvicorn_options(),
    )


def cmd_migrate(args: argparse.Namespace) -> None:
    from service.db.migrate import upgrade
    from service.settings import normalize_database_url

    url = os.environ.get("ELICITD_DATABASE_URL")
    if not url:
        raise ConfigurationError("ELICITD_DATABASE_URL is required")
    upgrade(normalize_database_url(url), args.revision)
    print(f"migrated to {args.revision}")


def _dev_keys() -> str:
    path = DATA_DIR / "dev-keys"
    if not path.exists():
        path.write_text(KeyRing.generate_entry("dev1"))
        path.chmod(0o600)
    return path.read_text().strip()


def _dev_signing_key() -> str:
    """The consent-receipt signing key of this dev instance (its public half is at /.well-known/jwks.json)."""
    from service.consent.receipts import ReceiptSigner

    path = DATA_DIR / "dev-signing-key.pem"
    if not path.exists():
        path.write_text(ReceiptSigner.generate_pem())
        path.chmod(0o600)
    return path.read_text()


async def _ensure_dev_client(settings: Settings) -> str:
    from service.db.engine import make_engine, make_sessionmaker
    from service.identity.clients import create_server_client, find_by_name
    from service.identity.keys import add_key

    key_file = DATA_DIR / "dev-api-key"
    engine = make_engine(settings)
    try:
        async with make_sessionmaker(engine)() as session:
            client = await find_by_name(session, "dev")
            if client is None:
                key = (await create_server_client(session, "dev", display_name="Development MCP server")).api_key
            elif key_file.exists():
                return key_file.read_text().strip()
            else:
                key = await add_key(session, client.id)
            await session.commit()
    finally:
        await engine.dispose()
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key


def cmd_dev(args: argparse.Namespace) -> None:
    """Embedded PostgreSQL and Redis unless URLs are configured; migrate; a dev client; serve."""
    import uvicorn

    from service.app import create_app
    from service.db.migrate import upgrade
    from service.embedded import EmbeddedPostgres, EmbeddedRedis
    from service.logs import configure_logging
    from service.services import build_services
    from service.serving import uvicorn_options

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ELICITD_DEV", "true")
    env.setdefault("ELICITD_LOG_JSON", "false")
    env.setdefault("ELICITD_KEYS", _dev_keys())
    if not env.get("ELICITD_SIGNING_KEY_FILE"):
        env.setdefault("ELICITD_SIGNING_KEY", _dev_signing_key())
    env.setdefault("ELICITD_PUBLIC_URL", f"http://127.0.0.1:{args.port}")
    redis = None
    if not env.get("ELICITD_DATABASE_URL"):
        print("starting embedded PostgreSQL under", DATA_DIR / "postgres", flush=True)
        pg = EmbeddedPostgres(DATA_DIR.resolve() / "postgres").start()
        env["ELICITD_DATABASE_URL"] = pg.ensure_database("elicitd")
    if not env.get("ELICITD_REDIS_URL"):
        redis = EmbeddedRedis(DATA_DIR.resolve() / "redis").start()
        env["ELICITD_REDIS_URL"] = redis.url
    try:
        settings = Settings.from_env(env)
        configure_logging(settings)
        upgrade(settings.database_url)
        key = asyncio.run(_ensure_dev_client(settings))
        # -- the config file (a broken one stops here, in one line), then Dev ID and Demo Files ----
        from service.config_file import apply_before_serving
        from service.devtools import prepare_dev_tools

        asyncio.run(apply_before_serving(settings, env))
        dev_tools = prepare_dev_tools(
            settings,
            data_dir=DATA_DIR,
            host=args.host,
            embedded=not os.environ.get("ELICITD_DATABASE_URL") and not os.environ.get("ELICITD_REDIS_URL"),
        )
        # ------------------------------------------------------------------------------------------
        base = settings.public_url
        print(
            f"""
elicitd is serving at {base}
  API docs:      {base}/schema
  readiness:     {base}/readyz
  dev API key:   {key}
  (stored in {DATA_DIR / "dev-api-key"}; the database and Redis live under {DATA_DIR}/)

Create a flow:
  curl -s -X POST {base}/v1/flows \\
    -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
    -d '{{"subject": {{"iss": "https://id.example.com", "sub": "u-123"}}, "kind": "external", "url": "http://127.0.0.1:9000/step"}}'
""",
            flush=True,
        )
        print(dev_tools.banner(key), flush=True)
        uvicorn.run(
            dev_tools.wrap(create_app(build_services(settings))),
            host=args.host,
            port=args.port,
            log_config=None,
            access_log=False,
            server_header=False,
            **uvicorn_options(),
        )
    finally:
        if redis is not None:
            redis.stop()


# ---- servers -----------------------------------------------------------------------------------------
async def _servers_create(args: argparse.Namespace) -> dict[str, Any]:
    from service.db.base import CLIENT_ID
    from service.db.engine import make_engine, make_sessionmaker
    from service.identity.clients import create_server_client

    settings = _settings()
    engine = make_engine(settings)
    try:
        async with make_sessionmaker(engine)() as session:
            created = await create_server_client(
                session,
                args.name,
                display_name=args.display_name,
                allowed_providers=args.provider or [],
                trusted_issuers=args.issuer or [],
            )
            await session.commit()
            return {
                "id": CLIENT_ID.format(created.client.id),
                "name": created.client.name,
                "display_name": created.client.display_name,
                "api_key": created.api_key,
            }
    finally:
        await engine.dispose()


def cmd_servers_create(args: argparse.Namespace) -> None:
    result = _run(_servers_create(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"created server client {result['name']} ({result['id']})")
    print(f"API key (shown once, store it now): {result['api_key']}")


# ---- keys --------------------------------------------------------------------------------------------
def cmd_keys_generate(args: argparse.Namespace) -> None:
    print(KeyRing.generate_entry(args.key_id))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elicitd", description="Durable state for MCP URL-mode elicitation.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve with ELICITD_DATABASE_URL / ELICITD_REDIS_URL")
    serve.add_argument("--host", default=os.environ.get("ELICITD_HOST", "0.0.0.0"))  # noqa: S104 - a server
    serve.add_argument("--port", type=int, default=int(os.environ.get("ELICITD_PORT", "8000")))
    serve.add_argument("--migrate", action="store_true", help="apply migrations first")
    serve.set_defaults(func=cmd_serve)

    dev = sub.add_parser("dev", help="serve on embedded PostgreSQL and Redis under .data/ (make run)")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.set_defaults(func=cmd_dev)

    migrate = sub.add_parser("migrate", help="apply Alembic migrations to ELICITD_DATABASE_URL")
    migrate.add_argument("revision", nargs="?", default="head")
    migrate.set_defaults(func=cmd_migrate)

    servers = sub.add_parser("servers", help="server clients (MCP servers that call the API)")
    servers_sub = servers.add_subparsers(dest="servers_command", required=True)
    create = servers_sub.add_parser("create", help="register an MCP server and print its API key once")
    create.add_argument("name")
    create.add_argument("--display-name")
    create.add_argument("--provider", action="append", help="allowed provider (repeatable; none = all)")
    create.add_argument("--issuer", action="append", help="trusted issuer (repeatable; none = all)")
    create.add_argument("--json", action="store_true")
    create.set_defaults(func=cmd_servers_create)

    keys = sub.add_parser("keys", help="encryption and signing keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="print a new key-ring entry for ELICITD_KEYS")
    generate.add_argument("--key-id", default="k1")
    generate.set_defaults(func=cmd_keys_generate)
    rotate = keys_sub.add_parser("rotate", help="re-encrypt stored secrets under the current (first) key")
    rotate.add_argument("--batch", type=int, default=200, help="rows per transaction")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(func=lambda args: importlib.import_module("service.crypto.rotate").cmd_keys_rotate(args))

    for module in _COMMAND_GROUPS:
        register: Callable[[Any], None] = importlib.import_module(module).register
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ElicitdError as exc:
        print(f"elicitd: {exc.detail}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
