"""Run the Alembic migrations: one migrator at a time, every statement bounded in time.

The chain lives in the top-level ``migrations/`` folder and ships inside the wheel as
``service.migrations``. It runs two ways, through the same ``migrations/env.py``:
``elicitd migrate`` (and ``elicitd serve --migrate``, ``elicitd dev``, the tests) calls the
functions below, which open the migration connection with :func:`migration_connection` and hand it
to Alembic; stock ``alembic`` (with the repository's ``alembic.ini``) runs ``env.py``, which opens
the same connection itself. Either way these hold:

- **One migrator at a time.** The migration connection takes a session-level advisory lock before
  Alembic reads ``alembic_version``. Replicas that start together queue on it; each one after the
  first reads the version the first one wrote and has nothing to do. The lock is session-level, not
  transaction-level, because it must outlive the per-migration commits and the autocommit blocks
  that ``CONCURRENTLY`` needs. The engine has no pool, so when the connection closes (also when a
  migration fails or the process dies) the session ends and PostgreSQL releases the lock.
- **Bounded statements.** While migrating, the session runs with ``lock_timeout`` (a DDL statement
  queued behind live traffic would block every later query on that table until it gets its lock)
  and ``statement_timeout`` (an exclusive lock is held for as long as the statement runs). A
  migration that fails either rolls back whole (one transaction per migration) and can be retried.
  A migration that knowingly needs longer raises the limit for itself with
  ``SET LOCAL statement_timeout = ...``, which ends with its transaction. The wait for the advisory
  lock has no limit: it lasts as long as the other migrator, whose statements are bounded.
- **Concurrent index builds.** Indexes on tables that grow with traffic (flows, flow_events,
  webhook_outbox, admin_audit_log, …) are built and dropped with :func:`create_index_concurrently`
  and :func:`drop_index_concurrently`, which block no reads or writes.
- **Offline scripts say the same.** ``--sql`` writes the statements instead of running them (a
  DBA's reviewed script): :func:`offline_preamble` opens it with the same lock, taken or refused
  at once, and the same timeouts. Migrations never read the database into Python, so every one of
  them has an offline form; what must be read is read by SQL in the script itself.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.resources
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from alembic import command, op
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from sqlalchemy import MetaData, TextClause, pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from service.db.base import Base
from service.errors import ConfigurationError
from service.settings import normalize_database_url


def migrations_dir() -> Path:
    """The Alembic scripts (``env.py``, ``script.py.mako``, ``versions/``): the top-level
    ``migrations/`` folder, shipped inside the wheel as the ``service.migrations`` package.

    Found as package resources, not relative to a source checkout: a non-editable install (the
    Docker image, ``pip install 'elicitd[server]'``) has no ``migrations/`` beside the package. In
    a checkout (an editable install) the same name maps to the top-level folder. Alembic reads the
    scripts from the file system, which an installed wheel provides.
    """
    return Path(str(importlib.resources.files("service.migrations")))


def database_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """``ELICITD_DATABASE_URL``, as the service reads it (``Settings.from_env``), with the asyncpg
    driver. Migrating needs no other setting: no keys, no Redis, no public URL."""
    url = (os.environ if env is None else env).get("ELICITD_DATABASE_URL")
    if not url:
        raise ConfigurationError("ELICITD_DATABASE_URL is required")
    return normalize_database_url(url)


# pg_advisory_lock key of the migration lock: fixed, so every elicitd version agrees on it
# (the first eight bytes of sha256(b"elicitd:migrations"), as a signed bigint).
MIGRATION_LOCK_KEY = -1907602853622853985

# Every module that declares tables; importing one registers its tables on ``Base.metadata``.
# A module missing here shows up in the drift test as tables the models do not know.
MODEL_MODULES = (
    "service.identity.models",
    "service.flows.models",
    "service.signals.models",
    "service.connections.models",
    "service.payments.models",
    "service.consent.models",
    "service.admin.models",
    "service.events.models",
    "service.grants.models",
    "service.branding.models",
    "service.operators.models",
)

# How autogenerate compares the models with the database, for the drift test and for writing new
# migrations. Types and server defaults are compared too (PostgreSQL evaluates both defaults, so
# '{}' and '{}'::text[] compare equal). Alembic never compares CHECK constraints or partial-index
# predicates; tests/db/test_drift.py compares those through the catalog.
COMPARE_OPTIONS: dict[str, Any] = {"compare_type": True, "compare_server_default": True}


@dataclass(frozen=True, slots=True)
class MigrationTimeouts:
    """Limits for the migration session, in PostgreSQL's units (``'5s'``, ``'500ms'``, ``'2min'``).

    The lock timeout matches the application's own (``db/engine.py``): a migration gives up no
    sooner than a request would. The statement timeout is the longest a migration statement may
    hold its locks; anything longer belongs in a concurrent build or a batched backfill.
    """

    lock: str = "5s"
    statement: str = "30s"


DEFAULT_TIMEOUTS = MigrationTimeouts()

# Session-wide (not SET LOCAL): the values must hold across the per-migration transactions.
_SET_TIMEOUTS = text(
    "SELECT set_config('lock_timeout', :lock, false), set_config('statement_timeout', :statement, false)"
)
_UNLOCK = text("SELECT pg_advisory_unlock(:key)")

# What pg_stat_activity shows for every migrator, online or running a ``--sql`` script.
APPLICATION_NAME = "elicitd-migrate"


def alembic_config(database_url: str | None = None, *, output: TextIO | None = None) -> Config:
    """The configuration ``elicitd migrate`` runs Alembic with: the shipped scripts, the database,
    and where ``--sql`` writes (stdout unless ``output``). Stock ``alembic`` reads ``alembic.ini``."""
    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if database_url:
        config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def target_metadata() -> MetaData:
    for module in MODEL_MODULES:
        importlib.import_module(module)
    return Base.metadata


def upgrade(
    database_url: str, revision: str = "head", *, timeouts: MigrationTimeouts = DEFAULT_TIMEOUTS
) -> tuple[str, ...]:
    """Blocking; runs its own event loop, so call ``upgrade_async`` when one is running."""
    return asyncio.run(upgrade_async(database_url, revision, timeouts=timeouts))


async def upgrade_async(
    database_url: str, revision: str = "head", *, timeouts: MigrationTimeouts = DEFAULT_TIMEOUTS
) -> tuple[str, ...]:
    """Upgrade to ``revision``; returns the revisions this call applied, in order (none if another
    migrator got there first)."""
    return await _locked(database_url, timeouts, lambda config: command.upgrade(config, revision))


async def downgrade_async(
    database_url: str, revision: str, *, timeouts: MigrationTimeouts = DEFAULT_TIMEOUTS
) -> tuple[str, ...]:
    """Downgrade to ``revision`` (``"base"`` for an empty schema, ``"-1"`` for one step); returns
    the revisions undone."""
    return await _locked(database_url, timeouts, lambda config: command.downgrade(config, revision))


async def current_async(database_url: str) -> tuple[str, ...]:
    """The revisions in ``alembic_version`` (none for an empty database), read under the migration
    lock, as stock ``alembic current`` reads them: a migration under way is waited for, not seen
    half done."""
    async with migration_connection(database_url) as connection:
        heads = await connection.run_sync(lambda sync: MigrationContext.configure(sync).get_current_heads())
    return tuple(heads)


def history() -> list[Script]:
    """Every revision the shipped chain knows, newest first (no database needed)."""
    return list(ScriptDirectory.from_config(alembic_config()).walk_revisions())


def write_sql(action: str, revision: str, output: TextIO, database_url: str | None = None) -> None:
    """Write the script that ``upgrade``/``downgrade`` to ``revision`` would run, for a DBA to review
    and run with ``psql -v ON_ERROR_STOP=1 -f``. Offline needs no database: give the starting point
    in the revision (``0012:head``; an upgrade starts from an empty database otherwise)."""
    config = alembic_config(database_url, output=output)
    if action == "upgrade":
        command.upgrade(config, revision, sql=True)
    elif action == "downgrade":
        command.downgrade(config, revision, sql=True)
    else:
        raise ValueError(f"no offline form for {action!r}")


async def schema_diff(database_url: str) -> list[Any]:
    """What autogenerate would change to make the database match the models: ``[]`` when in step."""
    engine = create_async_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(_compare)
    finally:
        await engine.dispose()


def _compare(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts=COMPARE_OPTIONS)
    return list(compare_metadata(context, target_metadata()))


LOCK_POLL_SECONDS = 0.2


@asynccontextmanager
async def migration_connection(
    database_url: str, timeouts: MigrationTimeouts = DEFAULT_TIMEOUTS
) -> AsyncIterator[AsyncConnection]:
    """A connection holding the migration lock, its session bounded by ``timeouts``: what every
    migrator runs Alembic on, under ``elicitd migrate`` and stock ``alembic`` alike."""
    # No timeouts while queueing for the lock, whatever the role's defaults say (see module doc).
    settings = {"application_name": APPLICATION_NAME, "lock_timeout": "0", "statement_timeout": "0"}
    engine = create_async_engine(database_url, poolclass=pool.NullPool, connect_args={"server_settings": settings})
    try:
        async with engine.connect() as connection:
            # Polled, with no transaction open between tries: a migrator blocked inside
            # pg_advisory_lock holds a snapshot, which the other's CREATE INDEX CONCURRENTLY waits
            # for while holding the lock the first waits for — a deadlock.
            lock = text("SELECT pg_try_advisory_lock(:key)")
            while not (await connection.execute(lock, {"key": MIGRATION_LOCK_KEY})).scalar():
                await connection.commit()
                await asyncio.sleep(LOCK_POLL_SECONDS)
            await connection.execute(_SET_TIMEOUTS, {"lock": timeouts.lock, "statement": timeouts.statement})
            await connection.commit()
            yield connection
            await connection.commit()
            await connection.execute(_UNLOCK, {"key": MIGRATION_LOCK_KEY})
            await connection.commit()
    finally:
        await engine.dispose()


async def _locked(database_url: str, timeouts: MigrationTimeouts, action: Callable[[Config], None]) -> tuple[str, ...]:
    config = alembic_config(database_url)
    ran: list[str] = []
    config.attributes["ran"] = ran
    async with migration_connection(database_url, timeouts) as connection:
        await connection.run_sync(_run_alembic, config, action)
    return tuple(ran)


def _run_alembic(connection: Connection, config: Config, action: Callable[[Config], None]) -> None:
    # env.py finds the connection here and runs on it instead of opening its own.
    config.attributes["connection"] = connection
    action(config)


_POSTGRES_DURATION = re.compile(r"\d+(?:us|ms|s|min|h|d)?")


def offline_preamble(timeouts: MigrationTimeouts = DEFAULT_TIMEOUTS) -> list[str]:
    """The statements a ``--sql`` script opens with, before its first migration: the migration lock
    and the timeouts every online migrator takes.

    A script cannot poll for the lock as :func:`migration_connection` does (plain SQL has no loop
    outside a ``DO`` block, and a blocking wait would hold the snapshot that deadlocks with another
    migrator's concurrent index build), so it takes the lock at once or stops there: run it with
    ``psql -v ON_ERROR_STOP=1``, and again once the other migrator is done.
    """
    for value in (timeouts.lock, timeouts.statement):
        if not _POSTGRES_DURATION.fullmatch(value):
            raise ValueError(f"not a PostgreSQL duration: {value!r}")
    return [
        f"SET application_name = '{APPLICATION_NAME}'",
        "DO $$ BEGIN IF NOT pg_try_advisory_lock("
        f"{MIGRATION_LOCK_KEY}) THEN RAISE EXCEPTION 'another migrator holds the elicitd migration lock "
        f"(pg_advisory_lock {MIGRATION_LOCK_KEY}): run this script once it is done'; END IF; END $$",
        f"SET lock_timeout = '{timeouts.lock}'",
        f"SET statement_timeout = '{timeouts.statement}'",
    ]


def offline_epilogue() -> list[str]:
    return [f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"]


# ---- helpers for migration scripts -----------------------------------------------------------------


def create_index_concurrently(name: str, table: str, columns: Sequence[str | TextClause], **kwargs: Any) -> None:
    """``CREATE INDEX CONCURRENTLY``: the rule for every new index on a table that grows with traffic.
    ``columns`` are names or expressions (``sa.text("COALESCE(checked_at, …)")``).

    A plain ``CREATE INDEX`` blocks every write to the table until the build ends. A concurrent build
    cannot run in a transaction: this commits the migration's work so far and builds in autocommit,
    so keep such a migration to index changes only, or a failure leaves it half applied. A failed
    build leaves an INVALID index behind, which is dropped before the next attempt: online when the
    catalog says it is invalid; in a ``--sql`` script (which cannot look) whenever one by that name
    exists, since at this revision any such index is a failed or unrecorded earlier attempt. Neither
    timeout applies to the build: it blocks no reads or writes, and its duration grows with the table.
    """
    with op.get_context().autocommit_block(), _no_timeouts():
        if op.get_context().as_sql:
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
        else:
            valid = op.get_bind().execute(_INDEX_VALID, {"name": name})
            if valid.scalar_one_or_none() is False:
                op.drop_index(name, table_name=table, postgresql_concurrently=True)
        op.create_index(name, table, list(columns), postgresql_concurrently=True, **kwargs)


def drop_index_concurrently(name: str, table: str) -> None:
    """``DROP INDEX CONCURRENTLY IF EXISTS``: a plain drop takes an exclusive lock on the table."""
    with op.get_context().autocommit_block(), _no_timeouts():
        op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)


_INDEX_VALID = text(
    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = :name"
)


@contextmanager
def _no_timeouts() -> Iterator[None]:
    """Lift both timeouts for the session, then put back what they were. Saved in the session's own
    settings, in SQL, so that a ``--sql`` script does the same as an online run."""
    op.execute(
        "SELECT set_config('elicitd.saved_lock_timeout', current_setting('lock_timeout'), false), "
        "set_config('elicitd.saved_statement_timeout', current_setting('statement_timeout'), false)"
    )
    op.execute("SET lock_timeout = 0")
    op.execute("SET statement_timeout = 0")
    try:
        yield
    finally:
        op.execute(
            "SELECT set_config('lock_timeout', current_setting('elicitd.saved_lock_timeout'), false), "
            "set_config('statement_timeout', current_setting('elicitd.saved_statement_timeout'), false)"
        )
