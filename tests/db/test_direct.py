"""The hot path's driver-level statements (``service.db.direct``) give back only usable connections.

A connection whose server answered "read-only" (a demoted primary), "shutting down" or that lost
its socket must leave the pool; returned, it would fail the next request that takes it too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.exc import DBAPIError

from service.db.direct import Statement
from service.db.engine import make_engine, make_statements
from service.db.errors import DbError, classify
from service.settings import Settings

_PID = Statement.named("SELECT pg_backend_pid() AS pid", lambda row: {"pid": row["pid"]})
_PID_AND_MODE = Statement.named(
    "SELECT pg_backend_pid() AS pid, current_setting('transaction_read_only') AS ro",
    lambda row: {"pid": row["pid"], "ro": row["ro"]},
)
_PROBE = Statement.command("CREATE TEMP TABLE elicitd_direct_probe (x int)")
_DIVIDE = Statement.named("SELECT 1 / CAST(:by AS int)", lambda row: row[0])


async def test_a_read_only_connection_is_discarded_not_returned(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(db_statement_pool_size=1)
    engine = make_engine(settings)
    direct = make_statements(settings, engine)
    try:
        before = await direct.one(_PID)
        assert before is not None
        # The session of the only pooled connection turns read-only, as a demoted primary's do.
        await direct.run(Statement.command("SET default_transaction_read_only = on"))
        with pytest.raises(DBAPIError) as failed:
            await direct.run(_PROBE)
        assert classify(failed.value) is DbError.READ_ONLY
        assert failed.value.connection_invalidated is True

        after = await direct.one(_PID_AND_MODE)
        assert after is not None
        assert after["pid"] != before["pid"]
        assert after["ro"] == "off"
        await direct.run(_PROBE)
    finally:
        await direct.close()
        await engine.dispose()


async def test_a_statement_error_keeps_the_connection(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(db_statement_pool_size=1)
    engine = make_engine(settings)
    direct = make_statements(settings, engine)
    try:
        before = await direct.one(_PID)
        assert before is not None
        with pytest.raises(DBAPIError) as failed:
            await direct.one(_DIVIDE, by=0)
        assert classify(failed.value) is DbError.DATA
        assert failed.value.connection_invalidated is False
        after = await direct.one(_PID)
        assert after is not None
        assert after["pid"] == before["pid"]
    finally:
        await direct.close()
        await engine.dispose()


async def test_a_statement_runs_with_its_names_and_gives_back_its_rows_type(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(db_statement_pool_size=1)
    engine = make_engine(settings)
    direct = make_statements(settings, engine)
    pair = Statement.named("SELECT :b::int AS b, :a::text AS a, :b::int + 1 AS c", lambda row: (row["a"], row["c"]))
    series = Statement.named("SELECT n FROM generate_series(1, :upto) AS n", lambda row: row["n"] * 10)
    nothing = Statement.named("SELECT 1 WHERE false AND :x::int = 0", lambda row: row)
    try:
        # Keyword order is the caller's; the text's $n order is the statement's.
        assert pair.sql == "SELECT $1::int AS b, $2::text AS a, $1::int + 1 AS c"
        assert await direct.one(pair, a="x", b=41) == ("x", 42)
        assert await direct.all(series, upto=3) == [10, 20, 30]
        assert await direct.one(nothing, x=1) is None
        await direct.run(Statement.command("CREATE TEMP TABLE elicitd_direct_run (x int)"))
        await direct.run(Statement.command("INSERT INTO elicitd_direct_run VALUES (:x)"), x=7)
        assert await direct.one(Statement.named("SELECT x FROM elicitd_direct_run", lambda row: row["x"])) == 7
        # A missing or an unknown name fails before anything reaches the server.
        with pytest.raises(KeyError):
            await direct.one(pair, a="x", c=1)
        with pytest.raises(TypeError, match=r"\['z'\]"):
            await direct.one(pair, a="x", b=1, z=2)
    finally:
        await direct.close()
        await engine.dispose()
