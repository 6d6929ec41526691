"""``elicitd dev`` (what ``make run`` calls): the service on embedded PostgreSQL and Redis.

One instance per data directory (``service.dev_instance``); embedded backends for whichever of the
database and Redis the environment does not name; the migrations, a dev server client and its API
key, the config file and the dev tools; then it serves until Ctrl-C or SIGTERM, and stops the
embedded servers on the way out however it is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

from service.cli_exits import CommandFailed, ExitCode, ensure_port_free
from service.dev_instance import DATA_DIR
from service.settings import KeyRing, Settings


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
    from service.db.unit import unit_of_work
    from service.identity.clients import create_server_client, find_by_name
    from service.identity.keys import add_key

    key_file = DATA_DIR / "dev-api-key"
    engine = make_engine(settings)
    try:
        async with unit_of_work(make_sessionmaker(engine)) as session:
            client = await find_by_name(session, "dev")
            if client is None:
                # The dev client names users without their tokens (the curl examples have none).
                created = await create_server_client(
                    session, "dev", display_name="Development MCP server", subject_proof="none"
                )
                key = created.api_key
            elif key_file.exists():
                return key_file.read_text().strip()
            else:
                key = await add_key(session, client.id)
    finally:
        await engine.dispose()
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(ExitCode.INTERRUPTED if signum == signal.SIGINT else ExitCode.TERMINATED)


@contextlib.contextmanager
def _stopping_cleanly() -> Iterator[None]:
    """SIGTERM stops ``elicitd dev`` the way Ctrl-C does: through its ``finally`` blocks.

    Python's default for SIGTERM ends the process on the spot, so the embedded PostgreSQL and Redis
    were left running whenever a process manager, an IDE or ``timeout`` stopped ``make run``. uvicorn
    handles both signals while serving, shuts the app down, then raises the signal again with the
    handler it found: this one, which unwinds like ``KeyboardInterrupt``. SIGINT gets it too, rather
    than ``KeyboardInterrupt``, which ``uvicorn.run`` swallows (the exit code would say 0), and even
    when SIGINT was inherited as ignored (a script's background job): uvicorn reacts to it anyway.
    The handlers in place before are restored at the end.
    """
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in saved:
        signal.signal(sig, _terminated)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _shield_cleanup() -> None:
    """Once stopping the embedded servers has begun, a second Ctrl-C or SIGTERM must not cut it
    short (that is how orphans are made); ``_stopping_cleanly`` restores the handlers after."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _instance_settings(env: dict[str, str]) -> dict[str, str]:
    """What ``--dev`` needs to reach this instance: its ``ELICITD_*`` settings, with multi-line
    values (the signing key) passed by file."""
    settings = {name: value for name, value in env.items() if name.startswith("ELICITD_") and "\n" not in value}
    if "\n" in env.get("ELICITD_SIGNING_KEY", "") and not env.get("ELICITD_SIGNING_KEY_FILE"):
        settings["ELICITD_SIGNING_KEY_FILE"] = str((DATA_DIR / "dev-signing-key.pem").resolve())
    return settings


def cmd_dev(args: argparse.Namespace) -> None:
    """One instance per data directory; embedded PostgreSQL and Redis unless URLs are configured;
    migrate; a dev client; serve; stop the embedded servers on Ctrl-C and SIGTERM alike."""
    from service import dev_instance

    with _stopping_cleanly(), dev_instance.hold(DATA_DIR, url=f"http://{args.host}:{args.port}"):
        ensure_port_free(args.host, args.port)
        _dev(args)


def _dev(args: argparse.Namespace) -> None:
    import uvicorn

    from service import dev_instance
    from service.app import create_app
    from service.db.migrate import upgrade
    from service.logs import configure_logging
    from service.services import build_services
    from service.serving import server_options

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ELICITD_DEV", "true")
    env.setdefault("ELICITD_LOG_JSON", "false")
    env.setdefault("ELICITD_KEYS", _dev_keys())
    if not env.get("ELICITD_SIGNING_KEY_FILE"):
        env.setdefault("ELICITD_SIGNING_KEY", _dev_signing_key())
    env.setdefault("ELICITD_PUBLIC_URL", f"http://127.0.0.1:{args.port}")
    with _embedded_backends(env):
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
  subject proof: none for this dev client (its key alone names any user; new clients require it)

Create a flow:
  curl -s -X POST {base}/v1/flows \\
    -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
    -d '{{"subject": {{"iss": "https://id.example.com", "sub": "u-123"}}, "kind": "external", "url": "http://127.0.0.1:9000/step"}}'
""",
            flush=True,
        )
        print(dev_tools.banner(key), flush=True)
        env_file = dev_instance.write_env(DATA_DIR, _instance_settings(env))
        print(
            f"Commands reach this instance with --dev (settings in {env_file}):\n"
            "  elicitd --dev servers create my-mcp-server\n  elicitd --dev admin flows list\n",
            flush=True,
        )
        try:
            uvicorn.run(
                dev_tools.wrap(create_app(build_services(settings))),
                host=args.host,
                port=args.port,
                log_config=None,
                access_log=False,
                server_header=False,
                **server_options(),
            )
        except SystemExit as exc:
            if exc.code == 3:  # uvicorn's STARTUP_FAILURE, after logging why
                raise CommandFailed("elicitd did not start (the log line above says why)", ExitCode.REFUSED) from None
            raise


@contextlib.contextmanager
def _embedded_backends(env: dict[str, str]) -> Iterator[None]:
    """Embedded PostgreSQL and Redis for whichever of the two ``env`` does not name, stopped on the
    way out however it is taken (an error, Ctrl-C, SIGTERM)."""
    from service.embedded import EmbeddedPostgres, EmbeddedRedis

    pg: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    try:
        if not env.get("ELICITD_DATABASE_URL"):
            print("starting embedded PostgreSQL under", DATA_DIR / "postgres", flush=True)
            pg = EmbeddedPostgres(DATA_DIR.resolve() / "postgres").start()
            env["ELICITD_DATABASE_URL"] = pg.ensure_database("elicitd")
        if not env.get("ELICITD_REDIS_URL"):
            redis = EmbeddedRedis(DATA_DIR.resolve() / "redis").start()
            env["ELICITD_REDIS_URL"] = redis.url
        yield
    finally:
        _shield_cleanup()
        if redis is not None:
            redis.stop()
        if pg is not None:
            pg.stop()
