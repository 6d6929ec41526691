"""The timeout rule holds for the values in force, and database errors are told apart by SQLSTATE —
shown with errors PostgreSQL really raises, and in the refresh path where they are handled."""

from __future__ import annotations

import inspect

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from elicitd_client.client import ElicitdClient
from service.connections import oauth
from service.connections.refresh import REFRESH_CLAIM_SECONDS, REFRESH_WAIT_SECONDS
from service.db.engine import LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS
from service.db.errors import DbError, classify, is_transient
from service.http import TIMEOUT_SECONDS
from tests.connections.conftest import Env, get_token, new_sub, plant_connection, provider_token_calls
from tests.support.apps import ServerClientHandle


def test_the_timeouts_agree(env: Env) -> None:
    """See "Timeouts" in service/db/engine.py: each bound is chosen against the next."""
    pool_timeout_ms = env.app.settings.db_pool_timeout_seconds * 1000  # the default: tests keep it
    assert LOCK_TIMEOUT_MS < STATEMENT_TIMEOUT_MS < pool_timeout_ms
    assert oauth.CALL_DEADLINE_SECONDS == TIMEOUT_SECONDS
    assert REFRESH_CLAIM_SECONDS > oauth.CALL_DEADLINE_SECONDS  # a claim outlives its call
    assert REFRESH_WAIT_SECONDS <= REFRESH_CLAIM_SECONDS
    client_timeout = inspect.signature(ElicitdClient).parameters["timeout"].default
    assert client_timeout > REFRESH_WAIT_SECONDS  # the token endpoint answers before its caller gives up


async def test_every_session_has_the_timeouts(env: Env) -> None:
    async with env.app.state.read_sessions() as session:
        lock = (await session.execute(text("SHOW lock_timeout"))).scalar_one()
        statement = (await session.execute(text("SHOW statement_timeout"))).scalar_one()
    assert (lock, statement) == (f"{LOCK_TIMEOUT_MS // 1000}s", f"{STATEMENT_TIMEOUT_MS // 1000}s")


async def test_database_errors_are_told_apart_by_sqlstate(env: Env) -> None:
    sessions = env.app.state.sessions
    sub = new_sub("locked")
    connection, _ = await plant_connection(env, sub)
    row = {"c": connection}
    where = "WHERE 'cn_' || replace(id::text, '-', '') = :c"
    async with sessions() as holder:
        await holder.execute(text(f"SELECT id FROM connections {where} FOR UPDATE"), row)
        async with sessions() as waiter:
            await waiter.execute(text("SET LOCAL lock_timeout = '50ms'"))
            with pytest.raises(DBAPIError) as lock_wait:
                await waiter.execute(text(f"UPDATE connections SET updated_at = now() {where}"), row)
        await holder.rollback()
    async with sessions() as session:
        await session.execute(text("SET LOCAL statement_timeout = '50ms'"))
        with pytest.raises(DBAPIError) as too_long:
            await session.execute(text("SELECT pg_sleep(1)"))
    async with sessions() as session:
        with pytest.raises(DBAPIError) as bad_value:
            await session.execute(text("SELECT 1 / 0"))
    async with sessions() as session:
        with pytest.raises(DBAPIError) as bug:
            await session.execute(text("SELECT no_such_column FROM connections"))

    assert classify(lock_wait.value) is DbError.LOCK_NOT_AVAILABLE
    assert classify(too_long.value) is DbError.QUERY_CANCELED
    assert classify(bad_value.value) is DbError.DATA
    assert classify(bug.value) is DbError.OTHER
    assert classify(ValueError("not a database error")) is None
    assert is_transient(lock_wait.value) and is_transient(too_long.value)
    assert not is_transient(bad_value.value) and not is_transient(bug.value)


async def test_a_lock_wait_that_runs_out_in_a_refresh_is_a_retry_not_a_slow_refresh(
    env: Env, client: ServerClientHandle
) -> None:
    """Something holds the connection's row past lock_timeout while a refresh claims it: the caller
    is told to retry (503 + Retry-After), as for any passing database condition — not that another
    refresh is slow, and the provider is not called. The retry then refreshes."""
    sub = new_sub("rowheld")
    connection, minted = await plant_connection(env, sub, granted_to=client, expires_in=5)
    calls = provider_token_calls(env.oauth, "refresh_token")
    async with env.app.state.sessions() as holder:
        await holder.execute(
            text("SELECT id FROM authorizations WHERE 'cn_' || replace(id::text, '-', '') = :c FOR UPDATE"),
            {"c": connection},
        )
        refused = await get_token(env, client, sub)
        await holder.rollback()
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["detail"] == "The database is briefly unavailable; retry shortly."
    assert provider_token_calls(env.oauth, "refresh_token") == calls
    retried = await get_token(env, client, sub)
    assert retried.status_code == 200 and retried.json()["access_token"] != minted["access_token"]
    assert provider_token_calls(env.oauth, "refresh_token") == calls + 1
