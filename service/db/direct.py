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

One shape for every such statement: its repository declares it once as a ``Statement`` (the SQL
with ``:name`` parameters and how one driver row becomes a typed value) and runs it through
``DirectStatements.one``/``all``/``run`` with keyword parameters, inside a typed method of that
repository's statements object (``service.flows.repository.FlowStatements``). A service calls the
method: it never holds SQL text, parameter order or an ``asyncpg.Record``
(docs/architecture.md, "Statements").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Generic, TypeVar

import asyncpg
from sqlalchemy.exc import DBAPIError

from service.db.errors import SERVER_LOST, classify
from service.db.pool import Pooled, StatementPool

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


R = TypeVar("R")


def _no_rows(row: asyncpg.Record) -> None:
    return None


def _nothing(params: Mapping[str, Any]) -> tuple[()]:
    return ()


@dataclass(frozen=True, slots=True)
class Statement(Generic[R]):
    """One constant statement: SQL written with ``:name`` parameters (as ``sqlalchemy.text`` takes
    them), turned once into asyncpg's ``$n`` form, and ``row``, which turns one driver row into
    what the repository's method returns. Written once at import, so a call pays no parsing and
    asyncpg prepares the text once per connection."""

    sql: str
    names: tuple[str, ...]
    row: Callable[[asyncpg.Record], R]
    # ``names``' values out of the keyword parameters in one C call: ~0.7 µs less per statement
    # than a comprehension, on every status read (measured alone, 300,000 calls).
    _pick: Callable[[Mapping[str, Any]], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pick: Callable[[Mapping[str, Any]], Any] = itemgetter(*self.names) if self.names else _nothing
        object.__setattr__(self, "_pick", pick)

    @classmethod
    def named(cls, text: str, row: Callable[[asyncpg.Record], R]) -> Statement[R]:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        return cls(_NAMED.sub(number, text), tuple(names), row)

    @staticmethod
    def command(text: str) -> Statement[None]:
        """A statement whose rows nobody reads (``DirectStatements.run``)."""
        return Statement.named(text, _no_rows)

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional arguments in the text's order; a missing or unknown name is a
        ``KeyError``/``TypeError`` here, not a wrong value bound to the wrong ``$n``."""
        if len(params) != len(self.names):
            unknown = sorted(set(params) - set(self.names))
            raise TypeError(f"parameters not in the statement: {unknown}")
        values = self._pick(params)
        return values if len(self.names) != 1 else (values,)


class DirectStatements:
    """``one``/``all``/``run`` of a constant ``Statement`` on a connection of the statement pool
    (``service.db.pool``): no ``Connection`` object, no execution options, no transaction block,
    so every statement is its own transaction and a returned connection has nothing to roll
    back."""

    def __init__(self, pool: StatementPool) -> None:
        self.pool = pool

    async def one(self, statement: Statement[R], **params: Any) -> R | None:
        """The statement's first row as its repository reads it, or None when there is none."""
        row: asyncpg.Record | None = await self._call("fetchrow", statement.sql, statement.args(params))
        return None if row is None else statement.row(row)

    async def all(self, statement: Statement[R], **params: Any) -> list[R]:
        decode = statement.row
        return [decode(row) for row in await self._call("fetch", statement.sql, statement.args(params))]

    async def run(self, statement: Statement[Any], **params: Any) -> None:
        await self._call("execute", statement.sql, statement.args(params))

    # The driver's calls the three above are made of: SQL text and positional arguments stay in
    # here, so every direct statement has the one shape.

    async def _call(self, call: str, sql: str, args: tuple[Any, ...]) -> Any:
        """The driver's ``fetchrow``, ``fetch`` or ``execute`` on a pooled connection, each returning
        it the same way: a driver error through ``_failed``, a cancelled statement as lost."""
        pooled = await self.pool.acquire()
        try:
            result = await getattr(pooled.connection, call)(sql, *args)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise self._failed(pooled, sql, exc) from exc
        except BaseException:
            self.pool.release(pooled, lost=True)  # cancelled mid-statement: its state is unknown
            raise
        self.pool.release(pooled)
        return result

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
