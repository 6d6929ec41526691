"""Hot-path statements run on a driver connection, without the ORM.

The requests every MCP server repeats (a flow's status, a retry's resolve, a connection's token,
a create) are one short statement each. Through an ORM session each paid ~150 µs of Python around
the statement (session and transaction bookkeeping, compiling, result and identity-map
processing): more than the statement itself and than the rest of the request. Here a statement
is text written once, prepared once per connection by asyncpg (its statement cache) and run with
positional parameters, outside any transaction block: a single statement is its own transaction, so a read pays no
``BEGIN``/``ROLLBACK`` and a single conditional write no separate ``COMMIT``.

The connection comes from the statement pool (``service.db.pool``), which the process holds beside
the ORM engine's pool, with its own size and the same wait bound (``PoolTimeout`` → 503 with ``Retry-After``),
connection settings and replacement of connections the server closed; see ``make_statements``.
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

from service.db.errors import SERVER_LOST, classify
from service.db.pool import Pooled, StatementPool

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
    """``fetchrow``/``fetch``/``execute`` of a constant SQL text on a connection of the statement
    pool (``service.db.pool``): no ``Connection`` object, no execution options, no transaction
    block, so every statement is its own transaction and a returned connection has nothing to
    roll back."""

    def __init__(self, pool: StatementPool) -> None:
        self.pool = pool

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        pooled = await self.pool.acquire()
        try:
            row = await pooled.connection.fetchrow(sql, *args)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        except BaseException:
            self.pool.release(pooled, lost=True)  # cancelled mid-statement: its state is unknown
            raise
        self.pool.release(pooled)
        return row

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        pooled = await self.pool.acquire()
        try:
            rows: list[asyncpg.Record] = await pooled.connection.fetch(sql, *args)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        except BaseException:
            self.pool.release(pooled, lost=True)
            raise
        self.pool.release(pooled)
        return rows

    async def execute(self, sql: str, *args: Any) -> None:
        pooled = await self.pool.acquire()
        try:
            await pooled.connection.execute(sql, *args)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        except BaseException:
            self.pool.release(pooled, lost=True)
            raise
        self.pool.release(pooled)

    async def close(self) -> None:
        await self.pool.close()

    def _failed(self, pooled: Pooled, sql: str, exc: Exception) -> DBAPIError:
        """The driver's error as SQLAlchemy raises it: ``orig`` is the driver's exception (its
        SQLSTATE is what ``classify`` reads).

        A connection whose server is lost, shutting down or read-only is cut, not returned, and
        every other connection of the pool is replaced (idle ones now, busy ones when returned), as
        the engine does for the ORM's statements (``_drop_lost_server``): after a failover a
        demoted primary keeps its connections open, and each would otherwise fail one more request
        before ``POOL_RECYCLE_SECONDS`` retired it. Any other error (a constraint, bad data) leaves
        the connection as usable as before.
        """
        lost = classify(exc) in SERVER_LOST or pooled.connection.is_closed()
        if lost:
            self.pool.expire()
        self.pool.release(pooled, lost=lost)
        return DBAPIError(sql, None, exc, connection_invalidated=lost)
