"""Hot-path statements run on the driver connection of a pooled connection, without the ORM.

The requests every MCP server repeats (a flow's status, a retry's resolve, a connection's token,
a create) are one short statement each. Through an ORM session each paid ~150 µs of Python around
the statement (session and transaction bookkeeping, compiling, result and identity-map
processing): more than the statement itself and than the rest of the request. Here a statement
is text written once, prepared once per connection by asyncpg (its statement cache) and run with
positional parameters, outside any transaction block: a single statement is its own transaction, so a read pays no
``BEGIN``/``ROLLBACK`` and a single conditional write no separate ``COMMIT``.

The connection still comes from the engine's pool: one pool per process, its size and timeout
(``PoolTimeout`` → 503 with ``Retry-After``), its replacement of connections the server closed.
Driver errors are raised as SQLAlchemy's ``DBAPIError`` with the driver's exception as ``orig``,
as the ORM would raise them, so ``service.db.errors.classify`` and the error handlers see one shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.pool import PoolProxiedConnection

from service.db.errors import SERVER_LOST, classify

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@dataclass(frozen=True, slots=True)
class Statement:
    """SQL written with ``:name`` parameters (as ``sqlalchemy.text`` takes them), turned once into
    asyncpg's ``$n`` form, so one text serves a session and the driver alike."""

    sql: str
    names: tuple[str, ...]

    @classmethod
    def named(cls, text: str) -> Statement:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        return cls(_NAMED.sub(number, text), tuple(names))

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


class DirectStatements:
    """``fetchrow``/``execute`` of a constant SQL text on a pooled driver connection.

    The connection is checked out as a bare pooled DBAPI connection (``raw_connection``): no
    ``Connection`` object, no execution options, ~60 µs less per statement than ``connect()``.
    SQLAlchemy never begins a transaction on it (only its own cursor does), so every statement is
    its own transaction, and returning it to the pool has nothing to roll back.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @classmethod
    def on(cls, sessions: async_sessionmaker[AsyncSession]) -> DirectStatements:
        """On the pool of the engine ``sessions`` are bound to (for services built without one)."""
        bind = sessions.kw["bind"]
        assert isinstance(bind, AsyncEngine)
        return cls(bind)

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        pooled = await self._engine.raw_connection()
        try:
            return await pooled.driver_connection.fetchrow(sql, *args)  # type: ignore[union-attr]
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        finally:
            pooled.close()

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        pooled = await self._engine.raw_connection()
        try:
            return await pooled.driver_connection.fetch(sql, *args)  # type: ignore[no-any-return,union-attr]
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        finally:
            pooled.close()

    async def execute(self, sql: str, *args: Any) -> None:
        pooled = await self._engine.raw_connection()
        try:
            await pooled.driver_connection.execute(sql, *args)  # type: ignore[union-attr]
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        finally:
            pooled.close()

    def _failed(self, pooled: PoolProxiedConnection, sql: str, exc: Exception) -> DBAPIError:
        """The driver's error as SQLAlchemy raises it: ``orig`` is the driver's exception (its
        SQLSTATE is what ``classify`` reads).

        A connection whose server is lost, shutting down or read-only is discarded, not returned
        (the ``finally`` then returns nothing), and the pool's older connections are replaced at
        their next checkout, as the engine does for the ORM's statements (``_drop_lost_server``):
        after a failover a demoted primary keeps its connections open, and each would otherwise
        fail one more request before ``POOL_RECYCLE_SECONDS`` retired it.
        """
        driver = pooled.driver_connection
        lost = classify(exc) in SERVER_LOST or bool(driver is not None and driver.is_closed())
        if lost:
            # What SQLAlchemy's own disconnect handling calls: this connection is invalidated,
            # every connection opened before it is recycled at checkout.
            self._engine.sync_engine.pool._invalidate(pooled, exc)
        return DBAPIError(sql, None, exc, connection_invalidated=lost)
