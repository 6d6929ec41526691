"""The ``elicitd`` command.

``serve`` runs the app against configured PostgreSQL/Redis; ``dev`` does the same on embedded ones
under ``.data/`` (what ``make run`` calls); ``migrate`` applies, undoes and shows Alembic migrations
(``service/db/cli.py``); ``servers`` manages server clients; ``keys`` makes and rotates keys.
Domains add their own subcommands through ``register`` functions listed in ``_COMMAND_GROUPS``.

``elicitd --dev COMMAND`` runs any command against the running ``elicitd dev`` (its settings come
from ``.data/dev.env``, see ``service/dev_instance.py``). Every command that prints a result takes
``--json``. A failure is one line on stderr and an exit code from ``service/cli_exits.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from service.cli_exits import CommandFailed, ExitCode, classify, ensure_port_free
from service.cli_output import print_json, print_table, report
from service.settings import KeyRing, Settings

DATA_DIR = Path(os.environ.get("ELICITD_DATA_DIR", ".data"))

# Modules with a ``register(subparsers)`` function adding their own subcommands.
_COMMAND_GROUPS: list[str] = [
    "service.db.cli",
    "service.identity.cli",
    "service.admin.cli",
    "service.payments.cli",
    "service.apikeys.cli",
    "service.connections.cli",
    "service.grants.cli",
]


def _settings() -> Settings:
    return Settings.from_env()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


__all__ = ["build_parser", "main", "print_table"]


# ---- serve / dev / migrate -------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from service.app import create_app
    from service.logs import configure_logging
    from service.services import build_services
    from service.serving import drain_seconds, serve, server_options

    settings = _settings()
    ensure_port_free(args.host, args.port)
    configure_logging(settings)
    if args.migrate:
        from service.db.migrate import upgrade

        upgrade(settings.database_url)
    if settings.config_file:
        from service.config_file import apply_before_serving

        # Here, not only in the app's lifespan: a broken file then stops `serve` with one line
        # naming the file and the entry (exit 3), where a failing lifespan prints the server's
        # startup traceback.
        asyncio.run(apply_before_serving(settings))
    services = build_services(settings)
    config = uvicorn.Config(
        create_app(services),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        timeout_graceful_shutdown=drain_seconds(settings.max_wait_seconds),
        **server_options(),
    )

    def drain() -> None:
        services.events.drain()
        services.flows.drain()

    serve(config, drain)


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


# ---- servers -----------------------------------------------------------------------------------------
# Both commands run through the admin CLI's audit: each writes a row with the status the admin API
# would have answered, as `elicitd admin clients …` does.
async def _servers_create(state: Any, args: argparse.Namespace) -> dict[str, Any]:
    from service.db.base import CLIENT_ID
    from service.db.unit import unit_of_work
    from service.identity.clients import create_server_client

    async with unit_of_work(state.sessions) as session:
        created = await create_server_client(
            session,
            args.name,
            display_name=args.display_name,
            allowed_providers=args.provider or [],
            trusted_issuers=args.issuer or [],
            subject_proof=args.subject_proof,
            resource_uris=args.resource_uri or [],
        )
    return {
        "id": CLIENT_ID.format(created.client.id),
        "name": created.client.name,
        "display_name": created.client.display_name,
        "subject_proof": created.client.subject_proof,
        "resource_uris": list(created.client.resource_uris),
        "api_key": created.api_key,
    }


def _proof_line(subject_proof: str, resource_uris: list[str]) -> str:
    if subject_proof == "none":
        return "subject proof: none (its API key alone names any user)"
    if resource_uris:
        return f"subject proof: required (users' tokens must be for {' or '.join(resource_uris)})"
    return (
        "subject proof: required, but no resource URI: every call naming a user is refused until one is set "
        "(elicitd servers update NAME --resource-uri URL)"
    )


def cmd_servers_create(args: argparse.Namespace) -> None:
    from service.admin.cli import audited

    args.target = args.name
    result = _run(audited(_servers_create, args))
    if args.json:
        print_json(result)
        return
    print(f"created server client {result['name']} ({result['id']})")
    print(_proof_line(result["subject_proof"], result["resource_uris"]))
    print(f"API key (shown once, store it now): {result['api_key']}")


async def _servers_update(state: Any, args: argparse.Namespace) -> dict[str, Any]:
    import msgspec

    from service.admin import clients
    from service.admin.schemas import UpdateServerClient
    from service.db.unit import unit_of_work

    fields: dict[str, Any] = {}
    if args.display_name is not None:
        fields["display_name"] = args.display_name
    if args.resource_uri is not None:
        fields["resource_uris"] = [] if args.resource_uri == [""] else args.resource_uri
    if args.subject_proof is not None:
        fields["subject_proof"] = args.subject_proof
    if not fields:
        raise CommandFailed(
            "servers update: nothing to change; give --display-name, --resource-uri or --subject-proof",
            ExitCode.USAGE,
        )
    try:
        data = msgspec.convert(fields, UpdateServerClient)
    except msgspec.ValidationError as invalid:
        raise CommandFailed(f"servers update: {invalid}", ExitCode.REFUSED) from None
    async with unit_of_work(state.sessions) as session:
        args.target = await clients.public_id_of(session, args.name)
        updated = await clients.update_client(session, args.target, data)
    return msgspec.to_builtins(updated)  # type: ignore[no-any-return]  # a ServerClientView: a dict of builtins


def cmd_servers_update(args: argparse.Namespace) -> None:
    from service.admin.cli import audited

    args.target = args.name
    result = _run(audited(_servers_update, args))
    if args.json:
        print_json(result)
        return
    print(f"updated server client {result['name']} ({result['id']}): {result['display_name']}")
    print(_proof_line(result["subject_proof"], list(result["resource_uris"])))


# ---- keys --------------------------------------------------------------------------------------------
def cmd_keys_generate(args: argparse.Namespace) -> None:
    entry = KeyRing.generate_entry(args.key_id)
    report(args.json, {"key_id": args.key_id, "entry": entry}, entry)


def _version() -> str:
    try:
        return version("elicitd")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elicitd", description="Durable state for MCP URL-mode elicitation.")
    parser.add_argument("--version", action="version", version=f"elicitd {_version()}")
    parser.add_argument(
        "--dev",
        action="store_true",
        help="run the command against the running `elicitd dev` (make run), with the settings in .data/dev.env",
    )
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

    servers = sub.add_parser("servers", help="server clients (MCP servers that call the API)")
    servers_sub = servers.add_subparsers(dest="servers_command", required=True)
    create = servers_sub.add_parser("create", help="register an MCP server and print its API key once")
    create.add_argument("name")
    create.add_argument("--display-name")
    create.add_argument("--provider", action="append", help="allowed provider (repeatable; none = all)")
    create.add_argument("--issuer", action="append", help="trusted issuer (repeatable; none = all)")
    create.add_argument(
        "--subject-proof",
        choices=("required", "none"),
        default="required",
        help="whether every call naming a user must carry that user's access token (default: required)",
    )
    create.add_argument(
        "--resource-uri",
        action="append",
        help="this MCP server's resource URI, the `aud` of its users' tokens (repeatable)",
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(func=cmd_servers_create, operation="adminCreateServerClient")
    update = servers_sub.add_parser(
        "update", help="change a server client's resource URIs, subject proof or display name (by name or id)"
    )
    update.add_argument("name", metavar="CLIENT", help="its name (as created) or its id (sc_…)")
    update.add_argument("--display-name")
    update.add_argument(
        "--resource-uri",
        action="append",
        help="the complete list of its resource URIs (repeatable); --resource-uri '' clears it",
    )
    update.add_argument("--subject-proof", choices=("required", "none"))
    update.add_argument("--json", action="store_true")
    update.set_defaults(func=cmd_servers_update, operation="adminUpdateServerClient")

    keys = sub.add_parser("keys", help="encryption and signing keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="print a new key-ring entry for ELICITD_KEYS")
    generate.add_argument("--key-id", default="k1")
    generate.add_argument("--json", action="store_true")
    generate.set_defaults(func=cmd_keys_generate)
    rotate = keys_sub.add_parser("rotate", help="re-encrypt stored secrets under the current (first) key")
    rotate.add_argument("--batch", type=int, default=200, help="rows per transaction")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(func=lambda args: importlib.import_module("service.rotation").cmd_keys_rotate(args))

    for module in _COMMAND_GROUPS:
        register: Callable[[Any], None] = importlib.import_module(module).register
        register(sub)
    return parser


# The domain trees' commands that change something. Their modules sit below the admin layer that
# owns the audit log, so the row is written here, after the command: the operation, the argument
# that names what changed, and the status the admin API would have answered.
_AUDITED: dict[tuple[str, str], tuple[str, str | None]] = {
    ("providers", "add"): ("cliSaveProvider", "name"),
    ("providers", "enable"): ("cliEnableProvider", "name"),
    ("providers", "disable"): ("cliDisableProvider", "name"),
    ("issuers", "add"): ("cliSaveIssuer", "issuer"),
    ("issuers", "enable"): ("cliEnableIssuer", "issuer"),
    ("issuers", "disable"): ("cliDisableIssuer", "issuer"),
    ("api-key-providers", "set"): ("cliSetApiKeyProvider", None),
    ("payments", "reconcile"): ("cliReconcilePayments", None),
}


def _run_audited(args: argparse.Namespace) -> None:
    from service.errors import ElicitdError

    entry = _AUDITED.get((args.command, getattr(args, f"{args.command.replace('-', '_')}_command", "")))
    if entry is None:
        args.func(args)
        return
    operation, naming = entry
    target = getattr(args, naming, None) if naming else None
    try:
        args.func(args)
    except ElicitdError as refused:
        _audit(operation, target, refused.status, {"result": "error", "code": refused.problem_code}, done=False)
        raise
    except CommandFailed as failed:
        if failed.code == ExitCode.REFUSED:  # refused by the command itself (bad input): nothing changed
            _audit(operation, target, 400, {"result": "error"}, done=False)
        raise
    _audit(operation, target, 200, {"result": "ok"}, done=True)


def _audit(operation: str, target: str | None, status: int, detail: dict[str, Any], *, done: bool) -> None:
    from service.admin.guards import write_audit
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work

    async def write() -> None:
        engine = make_engine(_settings())
        try:
            async with unit_of_work(make_sessionmaker(engine)) as session:
                await write_audit(
                    session, actor="cli", operation=operation, target=target, status=status, detail=detail
                )
        finally:
            await engine.dispose()

    try:
        _run(write())
    except Exception:  # the command's own outcome stands; the line says its row is missing
        if done:
            print("elicitd: done, but its admin_audit_log row could not be written", file=sys.stderr)


def _fail(failed: CommandFailed) -> None:
    print(f"elicitd: {failed.message}", file=sys.stderr)
    raise SystemExit(failed.code)


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.dev:
            from service import dev_instance

            if args.command == "dev":
                parser.error("--dev points other commands at a running `elicitd dev`; start it without --dev")
            os.environ.update(dev_instance.read_env(DATA_DIR))
        _run_audited(args)
    except KeyboardInterrupt:
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except BrokenPipeError:
        # The reader went away (`elicitd … | head`): what was printed is what was wanted. Point
        # stdout at /dev/null so the interpreter's final flush does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(ExitCode.OK) from None
    except Exception as exc:
        failed = classify(exc, database_url=os.environ.get("ELICITD_DATABASE_URL"))
        if failed is None:
            raise  # a bug: keep the traceback
        _fail(_with_dev_hint(failed, args, sys.argv[1:] if argv is None else list(argv)))


def _with_dev_hint(failed: CommandFailed, args: argparse.Namespace, argv: list[str]) -> CommandFailed:
    """A command run without settings while ``make run`` serves was meant for that instance: say
    to add ``--dev``, not to start another one."""
    from service import dev_instance

    missing = failed.code == ExitCode.CONFIGURATION and "ELICITD_DATABASE_URL is required" in failed.message
    if not missing or args.dev or args.command in {"dev", "serve"} or not dev_instance.is_running(DATA_DIR):
        return failed
    again = shlex.join(["elicitd", "--dev", *argv])
    return CommandFailed(
        f"ELICITD_DATABASE_URL is not set, and `elicitd dev` (make run) is running on {DATA_DIR}/: "
        f"add --dev to reach it: {again}",
        failed.code,
    )


if __name__ == "__main__":
    main()
