"""Alembic environment, the same under ``elicitd migrate`` and stock ``alembic``.

Every online run holds the migration lock and runs with its timeouts (``service.db.migrate``
explains both): ``elicitd migrate`` opens that connection itself and passes it in
``config.attributes``; stock ``alembic`` (``alembic.ini`` at the repository's root) gets here
without one, and this opens it through the same ``migration_connection``, on
``ELICITD_DATABASE_URL`` as the service reads it. Offline (``--sql``) writes a script that takes
the same lock and timeouts before its first migration. Each migration runs in its own transaction,
so a failed one rolls back whole and a retry starts from the last one that committed.

Operations in the migrations build their constraints with the models' naming convention (that is
what ``target_metadata`` brings besides autogenerate), so an explicit name in a migration is
wrapped in ``op.f()``: the ``ck`` convention would otherwise prefix it a second time.
"""

from __future__ import annotations

import asyncio
import logging.config
from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.operations.ops import MigrationScript
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from service.db import migrate
from service.errors import ConfigurationError

config = context.config


def _record(ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]) -> None:
    """What ``upgrade_async`` returns: the revisions this run applied (or undid), in order."""
    config.attributes.setdefault("ran", []).append(step.up_revision_id or "")


def _number_new_revisions(ctx: MigrationContext, revision: Any, directives: list[Any]) -> None:
    """``alembic revision --autogenerate`` numbers the new revision as the chain does (0014 after
    0013) unless ``--rev-id`` names it."""
    if getattr(config.cmd_opts, "rev_id", None):
        return
    head = ScriptDirectory.from_config(config).get_current_head() or "0"
    for script in directives:
        if isinstance(script, MigrationScript) and head.isdigit():
            script.rev_id = f"{int(head) + 1:04d}"


OPTIONS: dict[str, Any] = {
    "target_metadata": migrate.target_metadata(),
    "transaction_per_migration": True,
    "on_version_apply": _record,
    "process_revision_directives": _number_new_revisions,
    **migrate.COMPARE_OPTIONS,
}


def _run(connection: Connection) -> None:
    context.configure(connection=connection, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


async def _run_locked(database_url: str) -> None:
    async with migrate.migration_connection(database_url) as connection:
        await connection.run_sync(_run)


def _offline() -> None:
    # No database is needed to write the script, only its dialect.
    context.configure(dialect_name="postgresql", literal_binds=True, **OPTIONS)
    for statement in migrate.offline_preamble():
        context.execute(statement)
    with context.begin_transaction():
        context.run_migrations()
    for statement in migrate.offline_epilogue():
        context.execute(statement)


if config.config_file_name is not None:  # stock alembic: log as alembic.ini says
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

if context.is_offline_mode():
    _offline()
elif (connection := config.attributes.get("connection")) is not None:
    _run(connection)
else:  # stock alembic: the database the service uses
    try:
        database_url = migrate.database_url_from_env()
    except ConfigurationError as missing:  # alembic prints a CommandError as one line
        raise CommandError(f"{missing} (the database elicitd uses, e.g. postgresql://user@host/elicitd)") from None
    asyncio.run(_run_locked(database_url))
