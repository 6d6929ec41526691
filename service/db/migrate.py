"""Run the Alembic migrations: one migrator at a time, every statement bounded in time.

Every way of migrating (``elicitd migrate``, ``elicitd serve --migrate``, ``elicitd dev``, the
tests) comes through here, and ``service/migrations/env.py`` refuses to run otherwise, so these hold for
every run:

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
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.resources
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command, op
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from service.db.base import Base


def migrations_dir() -> Path:
    """The Alembic scripts (``env.py``, ``script.py.mako``, ``versions/``), shipped inside the package.

    Found as package resources, not relative to a source checkout: a non-editable install (the
    Docker image, ``pip install 'elicitd[server]'``) has no ``migrations/`` beside the package.
    Alembic reads the scripts from the file system, which an installed wheel provides.
    """
    return Path(str(importlib.resources.files("service.migrations")))


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


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
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
    """Downgrade to ``revision`` (``"base"`` for an empty schema); returns the revisions undone."""
    return await _locked(database_url, timeouts, lambda config: command.downgrade(config, revision))


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


async def _locked(database_url: str, timeouts: MigrationTimeouts, action: Callable[[Config], None]) -> tuple[str, ...]:
    config = alembic_config(database_url)
    ran: list[str] = []
    config.attributes["ran"] = ran
    # No timeouts while queueing for the lock, whatever the role's defaults say (see module doc).
    settings = {"application_name": "elicitd-migrate", "lock_timeout": "0", "statement_timeout": "0"}
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
            await connection.run_sync(_run_alembic, config, action)
            await connection.commit()
            await connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            await connection.commit()
    finally:
        await engine.dispose()
    return tuple(ran)


def _run_alembic(connection: Connection, config: Config, action: Callable[[Config], None]) -> None:
    config.attributes["connection"] = connection
    action(config)


# ---- helpers for migration scripts -----------------------------------------------------------------


def create_index_concurrently(name: str, table: str, columns: Sequence[str], **kwargs: Any) -> None:
    """``CREATE INDEX CONCURRENTLY``: the rule for every new index on a table that grows with traffic.

    A plain ``CREATE INDEX`` blocks every write to the table until the build ends. A concurrent build
    cannot run in a transaction: this commits the migration's work so far and builds in autocommit,
    so keep such a migration to index changes only, or a failure leaves it half applied. A failed
    build leaves an INVALID index behind, which is dropped before the next attempt. Neither timeout
    applies to the build: it blocks no reads or writes, and its duration grows with the table.
    """
    with op.get_context().autocommit_block(), _no_timeouts():
        valid = op.get_bind().execute(
            text("SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = :name"),
            {"name": name},
        )
        if valid.scalar_one_or_none() is False:
            op.drop_index(name, table_name=table, postgresql_concurrently=True)
        op.create_index(name, table, list(columns), postgresql_concurrently=True, **kwargs)


def drop_index_concurrently(name: str, table: str) -> None:
    """``DROP INDEX CONCURRENTLY IF EXISTS``: a plain drop takes an exclusive lock on the table."""
    with op.get_context().autocommit_block(), _no_timeouts():
        op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)


@contextmanager
def _no_timeouts() -> Iterator[None]:
    bind = op.get_bind()
    saved = bind.execute(text("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")).one()
    bind.execute(_SET_TIMEOUTS, {"lock": "0", "statement": "0"})
    try:
        yield
    finally:
        bind.execute(_SET_TIMEOUTS, {"lock": saved[0], "statement": saved[1]})
