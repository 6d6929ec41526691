"""Migrating as replicas do: several at once, next to live traffic, and back down again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.exc import DBAPIError

from service.db.migrate import (
    MIGRATION_LOCK_KEY,
    MigrationTimeouts,
    alembic_config,
    downgrade_async,
    schema_diff,
    upgrade_async,
)

# Every revision, oldest first: what one full upgrade applies.
ALL = tuple(reversed([script.revision for script in ScriptDirectory.from_config(alembic_config("")).walk_revisions()]))

_WAITING_MIGRATORS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'elicitd-migrate'
  AND wait_event_type = 'Lock' AND clock_timestamp() - query_start > make_interval(secs => $1)
"""

# Queued for the migration lock: it is polled with no transaction open (a migrator blocked inside
# pg_advisory_lock would hold a snapshot that the other's CREATE INDEX CONCURRENTLY waits for), so
# a queued migrator is a connected one that has not got the lock yet.
_QUEUED_MIGRATORS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'elicitd-migrate'
  AND clock_timestamp() - backend_start > make_interval(secs => $1)
"""


async def _connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))


@pytest.fixture
async def observer(empty_database: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test database that looks on (and plays the other replica)."""
    connection = await _connect(empty_database)
    yield connection
    await connection.close()


@pytest.fixture
async def traffic(empty_database: str) -> AsyncIterator[asyncpg.Connection]:
    """Live traffic: a connection that keeps a transaction open on the outbox."""
    connection = await _connect(empty_database)
    yield connection
    await connection.close()


async def _read_outbox_and_stay(traffic: asyncpg.Connection) -> asyncpg.transaction.Transaction:
    transaction = traffic.transaction()
    await transaction.start()
    await traffic.execute("SELECT count(*) FROM webhook_outbox")
    return transaction


async def _until_waiting(
    observer: asyncpg.Connection, migrators: list[asyncio.Task[Any]], seconds: float, query: str = _WAITING_MIGRATORS
) -> None:
    """Until every migrator has waited on a lock for ``seconds``; fails as soon as one stops."""
    deadline = time.monotonic() + 60
    while await observer.fetchval(query, seconds) != len(migrators):
        assert not any(m.done() for m in migrators), [m.result() for m in migrators if m.done()]
        assert time.monotonic() < deadline, f"the migrators never all waited {seconds} s on a lock"
        await asyncio.sleep(0.05)


async def _version(observer: asyncpg.Connection) -> list[str]:
    return [row[0] for row in await observer.fetch("SELECT version_num FROM alembic_version")]


async def test_two_migrators_at_once_apply_each_migration_exactly_once(
    empty_database: str, observer: asyncpg.Connection
) -> None:
    # Hold the migration lock so that both are certainly queued on it together, then let them go.
    await observer.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    short = MigrationTimeouts(lock="1s", statement="1s")
    migrators = [asyncio.create_task(upgrade_async(empty_database, timeouts=short)) for _ in range(2)]
    # Longer than both timeouts: queueing for the lock is not bounded by them.
    await _until_waiting(observer, migrators, 1.5, _QUEUED_MIGRATORS)
    await observer.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)

    applied = await asyncio.gather(*migrators)

    assert sorted(applied) == [(), ALL]
    assert await _version(observer) == [ALL[-1]]
    assert await schema_diff(empty_database) == []


@pytest.mark.parametrize(
    ("timeouts", "sqlstate"),
    [
        pytest.param(MigrationTimeouts(lock="200ms", statement="30s"), "55P03", id="lock_timeout"),
        pytest.param(MigrationTimeouts(lock="0", statement="200ms"), "57014", id="statement_timeout"),
    ],
)
async def test_a_migration_queued_behind_traffic_gives_up_and_rolls_back_whole(
    empty_database: str,
    observer: asyncpg.Connection,
    traffic: asyncpg.Connection,
    timeouts: MigrationTimeouts,
    sqlstate: str,
) -> None:
    await upgrade_async(empty_database, "0004")
    # A long read of webhook_outbox, which 0005 alters after creating three tables.
    reader = await _read_outbox_and_stay(traffic)

    with pytest.raises(DBAPIError) as failed:
        async with asyncio.timeout(60):  # without the timeouts it would wait for the reader forever
            await upgrade_async(empty_database, timeouts=timeouts)

    assert failed.value.orig is not None
    assert getattr(failed.value.orig, "sqlstate", None) == sqlstate
    await reader.rollback()
    assert await _version(observer) == ["0004"]
    assert await observer.fetchval("SELECT to_regclass('admin_tokens')") is None
    # The failed run released the migration lock with its connection: a retry starts at once.
    assert await upgrade_async(empty_database) == ALL[ALL.index("0005") :]


async def test_a_concurrent_index_change_waits_for_traffic_instead_of_timing_out(
    empty_database: str, observer: asyncpg.Connection, traffic: asyncpg.Connection
) -> None:
    await upgrade_async(empty_database, "0005")
    reader = await _read_outbox_and_stay(traffic)

    # 0006 drops an outbox index CONCURRENTLY, which waits for transactions using the table.
    migrator = asyncio.create_task(upgrade_async(empty_database, "0006", timeouts=MigrationTimeouts("200ms", "200ms")))
    await _until_waiting(observer, [migrator], 1.0)
    await reader.rollback()

    assert await migrator == ("0006",)
    assert await observer.fetchval("SELECT to_regclass('ix_webhook_outbox_server_client_id')") is None


async def test_downgrade_to_nothing_and_upgrade_again_gives_the_same_schema(
    empty_database: str, observer: asyncpg.Connection
) -> None:
    assert await upgrade_async(empty_database) == ALL

    assert await downgrade_async(empty_database, "base") == tuple(reversed(ALL))
    tables = await observer.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert [row[0] for row in tables] == ["alembic_version"]
    assert await _version(observer) == []

    assert await upgrade_async(empty_database) == ALL
    assert await schema_diff(empty_database) == []
