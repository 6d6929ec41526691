"""``elicitd api-key-providers``: define the providers whose keys people type into elicitd."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from service.cli_output import report


def register(subparsers: Any) -> None:
    group = subparsers.add_parser("api-key-providers", help="providers that use API keys instead of OAuth")
    sub = group.add_subparsers(dest="api_key_providers_command", required=True)
    put = sub.add_parser("set", help="create or replace an API-key provider from a JSON definition or catalog entry")
    put.add_argument("name")
    put.add_argument("--display-name", help="the name people see (default: the catalog entry's)")
    given = put.add_mutually_exclusive_group(required=True)
    given.add_argument("--config", help="the definition: JSON text, or @path/to/file.json")
    given.add_argument("--catalog", metavar="ENTRY", help="an api_key catalog entry (elicitd providers catalog)")
    put.add_argument("--disabled", action="store_true")
    put.add_argument("--json", action="store_true")
    put.set_defaults(func=cmd_set)
    show = sub.add_parser("list", help="list API-key providers and their definitions")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_list)


async def _with_session(work: Any) -> Any:
    from service.db.engine import make_engine, make_sessionmaker
    from service.db.unit import unit_of_work
    from service.settings import Settings

    engine = make_engine(Settings.from_env())
    try:
        async with unit_of_work(make_sessionmaker(engine)) as session:
            return await work(session)
    finally:
        await engine.dispose()


def cmd_set(args: argparse.Namespace) -> None:
    from service.apikeys.providers import upsert_api_key_provider

    if args.catalog:
        from service.apikeys.catalog import definition_from_entry
        from service.connections.catalog import CATALOG
        from service.errors import ConfigurationError

        entry = CATALOG.get(args.catalog)
        if entry is None:
            raise ConfigurationError(f"no catalog entry '{args.catalog}' (see elicitd providers catalog)")
        config = definition_from_entry(entry)
        display_name = args.display_name or entry.display_name
    else:
        raw = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
        config = json.loads(raw)
        display_name = args.display_name
        if not display_name:
            from service.errors import ConfigurationError

            raise ConfigurationError("--display-name is required with --config")
    asyncio.run(
        _with_session(lambda s: upsert_api_key_provider(s, args.name, display_name, config, enabled=not args.disabled))
    )
    report(
        args.json,
        {"name": args.name, "display_name": display_name, "enabled": not args.disabled},
        f"api-key provider {args.name} saved",
    )


def cmd_list(args: argparse.Namespace) -> None:
    import msgspec

    from service.apikeys.providers import list_api_key_providers
    from service.cli_output import print_table

    found = asyncio.run(_with_session(list_api_key_providers))
    rows = [
        {"name": p.name, "display_name": p.display_name, "enabled": p.enabled, "config": msgspec.to_builtins(p.config)}
        for p in found
    ]
    print_table(rows, ["name", "display_name", "enabled"], as_json=args.json)
