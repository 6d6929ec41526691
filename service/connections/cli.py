"""``elicitd providers add|list|disable|enable|catalog|lint|import-nango``: third-party providers.

Secrets never go on the command line (shell history, ``ps``): ``--client-secret-env`` names an
environment variable, or ``--client-secret-stdin`` reads one line from standard input.
``add --from FILE`` takes an operator's own catalog entry: it is linted, copied into
``ELICITD_PROVIDERS_DIR`` (where every replica reads it at start-up) and the provider is saved
from it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.cli_exits import CommandFailed, ExitCode
from service.cli_output import report
from service.connections.catalog import CATALOG, PROVIDERS_DIR_VARIABLE
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


def _entry_from_file(path: str) -> str:
    """Lint an operator's entry file, place it in the providers directory, and make it this
    process's catalog entry; its key (the file's name) is returned."""
    import shutil
    from pathlib import Path

    from service.connections.catalog import entry_from_document, key_of, read_document
    from service.connections.catalog_lint import lint_file

    source = Path(path)
    problems = lint_file(source)
    if problems:
        raise CommandFailed("\n".join(problems), ExitCode.CONFIGURATION)
    directory = os.environ.get(PROVIDERS_DIR_VARIABLE)
    if not directory or not Path(directory).is_dir():
        raise CommandFailed(
            f"--from needs {PROVIDERS_DIR_VARIABLE} set to a directory every replica reads at start-up",
            ExitCode.CONFIGURATION,
        )
    target = Path(directory) / source.name
    if target.resolve() != source.resolve():
        shutil.copyfile(source, target)
    key = key_of(source)
    CATALOG[key] = entry_from_document(key, read_document(target), built_in=False)
    return key


def _parameters(given: list[str] | None) -> dict[str, str] | None:
    if not given:
        return None
    values = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandFailed(f"--param takes NAME=VALUE, not '{item}'", ExitCode.USAGE)
        values[name] = value
    return values


def cmd_add(args: argparse.Namespace) -> None:
    from service.connections.discovery import MetadataCache
    from service.connections.providers import ProviderSpec, public_view, resolve, upsert_provider

    if args.from_file:
        if args.catalog:
            raise CommandFailed("give --catalog or --from, not both", ExitCode.USAGE)
        args.catalog = _entry_from_file(args.from_file)
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
        parameters=_parameters(args.param),
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


def _needs(entry: Any) -> str:
    if entry.auth_mode == "api_key":
        return "the user's key"
    needs = ["client id", "secret"] if entry.token_auth_method != "none" else ["client id"]
    if entry.needs_issuer or entry.key == "oauth2":
        needs.append("issuer")
    needs += [f"{{{name}}}" for name in entry.parameters]
    return ", ".join(needs)


def cmd_catalog(args: argparse.Namespace) -> None:
    from service.cli_output import print_table

    rows = [
        {
            "catalog": e.key,
            "display_name": e.display_name,
            "auth_mode": e.auth_mode,
            "categories": list(e.categories),
            "default_scopes": " ".join(e.default_scopes),
            "needs": _needs(e),
            "setup_url": e.setup_url,
            "origin": "built-in" if e.built_in else "operator",
        }
        for e in sorted(CATALOG.values(), key=lambda e: e.key)
    ]
    columns = ["catalog", "display_name", "auth_mode", "needs", "setup_url", "origin"]
    if args.json:
        columns = [*columns, "categories", "default_scopes"]
    print_table(rows, columns, as_json=args.json)


def cmd_lint(args: argparse.Namespace) -> None:
    """The built-in entries and the operator's directory, or just the files given."""
    from pathlib import Path

    from service.connections.catalog import BUILT_IN_DIR, entry_files
    from service.connections.catalog_lint import lint_file

    if args.files:
        paths = [Path(f) for f in args.files]
    else:
        paths = entry_files(BUILT_IN_DIR)
        if directory := os.environ.get(PROVIDERS_DIR_VARIABLE):
            paths += entry_files(Path(directory))
    problems = [problem for path in paths for problem in lint_file(path)]
    if problems:
        raise CommandFailed("\n".join(problems), ExitCode.REFUSED)
    report(
        args.json,
        {"checked": len(paths), "problems": []},
        f"{len(paths)} provider {'entry' if len(paths) == 1 else 'entries'} checked: no problems",
    )


def cmd_import_nango(args: argparse.Namespace) -> None:
    """Write one elicitd entry per provider of the operator's Nango file, each linted."""
    from pathlib import Path

    import yaml

    from service.connections.catalog_import import import_nango
    from service.connections.catalog_lint import lint_document

    try:
        document = yaml.safe_load(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CommandFailed(f"{args.file}: cannot be read ({type(exc).__name__})", ExitCode.CONFIGURATION) from None
    target = Path(args.into)
    if not target.is_dir():
        raise CommandFailed(f"{target} is not a directory", ExitCode.CONFIGURATION)
    rows = []
    for imported in import_nango(document, set(args.only) if args.only else None):
        row: dict[str, Any] = {"key": imported.key, "written": False, "notes": imported.notes, "problems": []}
        if imported.document is not None:
            row["problems"] = lint_document(imported.key, imported.document)
            path = target / f"{imported.key}.yaml"
            if path.exists() and not args.replace:
                row["notes"] = [*imported.notes, f"{path.name} exists: kept (give --replace)"]
            else:
                header = f"# Imported from a Nango providers.yaml ({Path(args.file).name}); review before use.\n"
                path.write_text(header + yaml.safe_dump(imported.document, sort_keys=False, allow_unicode=True))
                row["written"] = True
        rows.append(row)
    from service.cli_output import print_table

    print_table(rows, ["key", "written", "problems", "notes"], as_json=args.json)


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
    add.add_argument("--from", dest="from_file", metavar="FILE", help="an entry file of your own (see providers lint)")
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
    add.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="a value the entry's URLs are templated from (repeatable)",
    )
    add.add_argument("--no-discover", action="store_true", help="save without checking discovery now")
    add.add_argument("--json", action="store_true")
    add.set_defaults(func=cmd_add)
    listing = sub.add_parser("list", help="list providers (secrets are never shown)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    catalog = sub.add_parser("catalog", help="the built-in catalog of well-known providers")
    catalog.add_argument("--json", action="store_true")
    catalog.set_defaults(func=cmd_catalog)
    lint = sub.add_parser("lint", help="check catalog entries (built-in and ELICITD_PROVIDERS_DIR, or the files given)")
    lint.add_argument("files", nargs="*", metavar="FILE")
    lint.add_argument("--json", action="store_true")
    lint.set_defaults(func=cmd_lint)
    nango = sub.add_parser("import-nango", help="entries from a Nango providers.yaml you supply")
    nango.add_argument("file", metavar="FILE")
    nango.add_argument(
        "--into", required=True, metavar="DIR", help="where to write the entries (e.g. ELICITD_PROVIDERS_DIR)"
    )
    nango.add_argument("--only", action="append", metavar="KEY", help="just this provider (repeatable)")
    nango.add_argument("--replace", action="store_true", help="overwrite entry files that exist")
    nango.add_argument("--json", action="store_true")
    nango.set_defaults(func=cmd_import_nango)
    for name, enabled in (("disable", False), ("enable", True)):
        parser = sub.add_parser(name, help=f"{name} a provider (existing connections are kept)")
        parser.add_argument("name")
        parser.add_argument("--json", action="store_true")
        parser.set_defaults(func=_set_enabled(enabled))
