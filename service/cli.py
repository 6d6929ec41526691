"""The ``elicitd`` command.

``serve`` runs the app against configured PostgreSQL/Redis; ``dev`` does the same on embedded ones
under ``.data/`` (what ``make run`` calls; ``service/dev_command.py``); ``migrate`` applies, undoes
and shows Alembic migrations (``service/db/cli.py``); ``servers`` manages server clients; ``keys``
makes and rotates keys.
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
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, TypeVar

from service.cli_exits import CommandFailed, ExitCode, classify
from service.cli_output import print_json, print_table, report
from service.dev_instance import DATA_DIR
from service.settings import KeyRing, Settings

if TYPE_CHECKING:
    from service.services import Services


# Modules with a ``register(subparsers)`` function adding their own subcommands; those in
# ``_ON_SERVICES`` are handed the services opener too (``register(subparsers, _open_services)``),
# a kind's in ``_ON_KINDS`` the opener of a kind's services (``register(subparsers, _open_kind)``).
_COMMAND_GROUPS: list[str] = [
    "service.db.cli",
    "service.identity.cli",
    "service.admin.cli",
    "service.payments.cli",
    "service.apikeys.cli",
    "service.connections.cli",
    "service.grants.cli",
    "service.operators.cli",
]
_ON_SERVICES = frozenset({"service.admin.cli"})
_ON_KINDS = frozenset({"service.payments.cli"})
T = TypeVar("T")


def _settings() -> Settings:
    return Settings.from_env()


@contextlib.asynccontextmanager
async def _open_services() -> AsyncIterator[Services]:
    """The services a command runs on (no web app), started, so flow cancels and expiries still
    wake waiters through Redis; the admin commands get this from here instead of opening the whole
    service themselves."""
    from service.services import open_services

    async with open_services(_settings().with_(background_tasks=False)) as services:
        yield services


@contextlib.asynccontextmanager
async def _open_kind(name: str, of: type[T]) -> AsyncIterator[T]:
    """A kind's services (``Services.kind``) on the services a command runs on."""
    async with _open_services() as services:
        yield services.kind(name, of)


if TYPE_CHECKING:
    from service.admin.cli import OpenServices as AdminOpenServices
    from service.kind_context import OpenKind

    _kinds: OpenKind = _open_kind

    # The container gives the admin commands every part their handlers read.
    _admin_services: AdminOpenServices = _open_services


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


__all__ = ["build_parser", "main", "print_table"]


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
    result = _run(audited(_open_services, _servers_create, args))
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
    result = _run(audited(_open_services, _servers_update, args))
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


def _at_least_one(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {value!r}")
    return number


def _add_worker(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="run the upkeep (expiry sweeps, webhook delivery, proactive refresh, probes) without serving",
    )
    worker.add_argument(
        "--nice",
        type=int,
        default=int(os.environ.get("ELICITD_WORKER_NICE", "10")),
        help="lower this process's CPU priority by this much (0: as the servers), so the replicas "
        "serving requests on the same machine come first (default 10)",
    )
    worker.set_defaults(func=lambda args: importlib.import_module("service.worker_command").cmd_worker(args))


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
    serve.add_argument(
        "--workers",
        type=_at_least_one,
        # A string: argparse converts it with ``type``, so a bad ELICITD_WORKERS is a usage error.
        default=os.environ.get("ELICITD_WORKERS", "1"),
        help="serving processes on one socket, one per core (default 1; the upkeep runs in the first)",
    )
    serve.set_defaults(func=lambda args: importlib.import_module("service.serve_command").cmd_serve(args))

    _add_worker(sub)

    dev = sub.add_parser("dev", help="serve on embedded PostgreSQL and Redis under .data/ (make run)")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.set_defaults(func=lambda args: importlib.import_module("service.dev_command").cmd_dev(args))

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
        register: Callable[..., None] = importlib.import_module(module).register
        if module in _ON_SERVICES:
            register(sub, _open_services)
        elif module in _ON_KINDS:
            register(sub, _open_kind)
        else:
            register(sub)
    return parser


# The domain trees' commands that change something and know nothing of the audit log: their row
# is written here, after the command, through the one writer (``service.db.audit``): the
# operation, the argument that names what changed, and the status the admin API would have
# answered.
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
    from service.db.audit import outcome
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
        _audit(operation, target, *outcome(refused), done=False)
        raise
    except CommandFailed as failed:
        if failed.code == ExitCode.REFUSED:  # refused by the command itself (bad input): nothing changed
            _audit(operation, target, 400, {"result": "error"}, done=False)
        raise
    _audit(operation, target, *outcome(None), done=True)


def _audit(operation: str, target: str | None, status: int, detail: dict[str, Any], *, done: bool) -> None:
    from service.db.audit import write_audit
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
