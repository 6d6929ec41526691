"""The statement pool (``service.db.pool``) on a real PostgreSQL: bounded, fair, and never leaks a
connection slot, whether a waiter times out, is cancelled, or a connection attempt fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.db.engine import make_engine, make_statements
from service.db.pool import StatementPool
from service.settings import Settings

Connect = Callable[[], Awaitable[asyncpg.Connection]]


@pytest.fixture
async def connect(make_settings: Callable[..., Settings]) -> AsyncIterator[Connect]:
    """``make_statements``' own connect function, with the test database's settings."""
    settings = make_settings()
    engine = make_engine(settings)
    statements = make_statements(settings, engine)
    try:
        yield statements.pool._connect
    finally:
        await statements.close()
        await engine.dispose()


async def test_an_idle_connection_is_reused_and_json_is_decoded(connect: Connect) -> None:
    pool = StatementPool(connect, size=2, timeout=1, recycle_seconds=300)
    try:
        first = await pool.acquire()
        pid = first.connection.get_server_pid()
        assert await first.connection.fetchval("SELECT '{\"a\": [1, 2]}'::jsonb") == {"a": [1, 2]}
        assert await first.connection.fetchval("SELECT $1::json", '{"b": null}') == {"b": None}
        pool.release(first)
        again = await pool.acquire()
        assert again.connection.get_server_pid() == pid
        assert (pool.checked_out(), pool.idle()) == (1, 0)
        pool.release(again)
        assert (pool.checked_out(), pool.idle()) == (0, 1)
    finally:
        await pool.close()


async def test_a_full_pool_queues_then_times_out(connect: Connect) -> None:
    pool = StatementPool(connect, size=1, timeout=0.2, recycle_seconds=300)
    try:
        held = await pool.acquire()
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PoolTimeout, match="limit of size 1 reached"):
            await pool.acquire()
        assert 0.2 <= loop.time() - started < 0.6
        assert pool.waiting() == 0  # the request that gave up left the line
        # A waiter in line gets the connection the moment it is returned.
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert pool.waiting() == 1
        pool.release(held)
        handed = await asyncio.wait_for(waiting, 1)
        assert handed is held
        assert pool.waiting() == 0
        assert pool.checked_out() == 1
        pool.release(handed)
    finally:
        await pool.close()


async def test_waiters_are_served_in_arrival_order(connect: Connect) -> None:
    pool = StatementPool(connect, size=1, timeout=5, recycle_seconds=300)
    try:
        held = await pool.acquire()
        served: list[int] = []

        async def take(n: int) -> None:
            pooled = await pool.acquire()
            served.append(n)
            await asyncio.sleep(0)
            pool.release(pooled)

        tasks = []
        for n in range(5):
            tasks.append(asyncio.ensure_future(take(n)))
            await asyncio.sleep(0)
        pool.release(held)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert served == [0, 1, 2, 3, 4]
    finally:
        await pool.close()


async def test_a_cancelled_waiter_leaks_nothing(connect: Connect) -> None:
    pool = StatementPool(connect, size=1, timeout=5, recycle_seconds=300)
    try:
        held = await pool.acquire()
        waiters = [asyncio.ensure_future(pool.acquire()) for _ in range(3)]
        await asyncio.sleep(0.01)
        # The first is handed the connection and cancelled before it runs: it must pass it on.
        pool.release(held)
        waiters[0].cancel()
        waiters[1].cancel()
        result = await asyncio.wait_for(waiters[2], 1)
        assert result is held
        assert [w.cancelled() for w in waiters[:2]] == [True, True]
        pool.release(result)
        assert (pool.checked_out(), pool.idle()) == (0, 1)
    finally:
        await pool.close()


async def test_a_failed_connection_attempt_frees_its_slot(connect: Connect) -> None:
    attempts = 0

    async def flaky() -> asyncpg.Connection:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise OSError("connection refused")
        return await connect()

    pool = StatementPool(flaky, size=1, timeout=1, recycle_seconds=300)
    try:
        with pytest.raises(OSError, match="connection refused"):
            await pool.acquire()
        assert pool.checked_out() == 0
        pooled = await pool.acquire()
        assert await pooled.connection.fetchval("SELECT 1") == 1
        pool.release(pooled)
    finally:
        await pool.close()


async def test_expire_and_recycle_replace_connections(connect: Connect) -> None:
    now = [0.0]
    pool = StatementPool(connect, size=2, timeout=1, recycle_seconds=300, monotonic=lambda: now[0])
    try:
        busy = await pool.acquire()
        idle = await pool.acquire()
        pool.release(idle)
        pool.expire()  # a failover: every connection opened so far goes
        assert pool.idle() == 0
        pool.release(busy)  # returned after the expiry: closed, not kept
        assert (pool.checked_out(), pool.idle()) == (0, 0)
        fresh = await pool.acquire()
        assert fresh.connection is not busy.connection and fresh.connection is not idle.connection
        pool.release(fresh)
        now[0] = 301.0  # older than the recycle age: replaced at the next checkout
        newer = await pool.acquire()
        assert newer.connection is not fresh.connection
        pool.release(newer)
        await asyncio.sleep(0.1)
        assert busy.connection.is_closed() and idle.connection.is_closed() and fresh.connection.is_closed()
    finally:
        await pool.close()


async def test_a_lost_connection_is_cut_and_its_slot_reopened(connect: Connect) -> None:
    pool = StatementPool(connect, size=1, timeout=1, recycle_seconds=300)
    try:
        pooled = await pool.acquire()
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.01)
        pool.release(pooled, lost=True)
        assert pooled.connection.is_closed()
        replacement = await asyncio.wait_for(waiting, 2)  # the waiter opens a connection in the freed slot
        assert replacement.connection is not pooled.connection
        assert await replacement.connection.fetchval("SELECT 1") == 1
        pool.release(replacement)
    finally:
        await pool.close()
