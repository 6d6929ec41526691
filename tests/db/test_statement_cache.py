"""``ELICITD_DB_STATEMENT_CACHE=false``: no prepared statement outlives its use on a connection.

Behind PgBouncer before 1.21 in transaction mode, a statement prepared by name in one transaction
is missing from (or already taken on) the server connection the next transaction gets; docs/scaling.md
shows the service failing there with the cache and passing without it.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text

from service.db.engine import make_engine
from service.settings import Settings


async def _cache_size_and_named_statements(settings: Settings) -> tuple[int, int]:
    engine = make_engine(settings)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1 WHERE :x = 1"), {"x": 1})
            raw = await connection.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            await driver.fetchrow("SELECT $1::int", 1)  # the hot path's way (service/db/direct.py)
            named = await driver.fetchval("SELECT count(*) FROM pg_prepared_statements")
            return driver._stmt_cache.get_max_size(), int(named)
    finally:
        await engine.dispose()


async def test_cache_off_prepares_nothing_by_name(make_settings: Callable[..., Settings]) -> None:
    assert await _cache_size_and_named_statements(make_settings(db_statement_cache=False)) == (0, 0)


async def test_cache_on_by_default(make_settings: Callable[..., Settings]) -> None:
    size, named = await _cache_size_and_named_statements(make_settings())
    assert size > 0
    assert named >= 1


def test_setting_reads_true_and_false() -> None:
    base = {"ELICITD_DATABASE_URL": "postgresql://x/y", "ELICITD_PUBLIC_URL": "https://e.example"}
    base["ELICITD_KEYS"] = "k1:" + "A" * 43
    assert Settings.from_env(base).db_statement_cache is True
    assert Settings.from_env(base | {"ELICITD_DB_STATEMENT_CACHE": "false"}).db_statement_cache is False
