"""The hot path's driver-level statements (``service.db.direct``) give back only usable connections.

A connection whose server answered "read-only" (a demoted primary), "shutting down" or that lost
its socket must leave the pool; returned, it would fail the next request that takes it too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.exc import DBAPIError

from service.db.engine import make_engine, make_statements
from service.db.errors import DbError, classify
from service.settings import Settings


async def test_a_read_only_connection_is_discarded_not_returned(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(db_statement_pool_size=1)
    engine = make_engine(settings)
    direct = make_statements(settings, engine)
    try:
        before = await direct.fetchrow("SELECT pg_backend_pid() AS pid")
        assert before is not None
        # The session of the only pooled connection turns read-only, as a demoted primary's do.
        await direct.execute("SET default_transaction_read_only = on")
        with pytest.raises(DBAPIError) as failed:
            await direct.execute("CREATE TEMP TABLE elicitd_direct_probe (x int)")
        assert classify(failed.value) is DbError.READ_ONLY
        assert failed.value.connection_invalidated is True

        after = await direct.fetchrow("SELECT pg_backend_pid() AS pid, current_setting('transaction_read_only') AS ro")
        assert after is not None
        assert after["pid"] != before["pid"]
        assert after["ro"] == "off"
        await direct.execute("CREATE TEMP TABLE elicitd_direct_probe (x int)")
    finally:
        await direct.close()
        await engine.dispose()


async def test_a_statement_error_keeps_the_connection(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(db_statement_pool_size=1)
    engine = make_engine(settings)
    direct = make_statements(settings, engine)
    try:
        before = await direct.fetchrow("SELECT pg_backend_pid() AS pid")
        assert before is not None
        with pytest.raises(DBAPIError) as failed:
            await direct.fetchrow("SELECT 1 / $1::int", 0)
        assert classify(failed.value) is DbError.DATA
        assert failed.value.connection_invalidated is False
        after = await direct.fetchrow("SELECT pg_backend_pid() AS pid")
        assert after is not None
        assert after["pid"] == before["pid"]
    finally:
        await direct.close()
        await engine.dispose()
