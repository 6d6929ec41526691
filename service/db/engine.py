"""Engine and session factory. Sessions are short: one unit of work, committed explicitly.

Timeouts
--------
Every wait in elicitd has a bound, and the bounds are chosen against each other; this is the rule
(docs/architecture.md#timeouts says the same for operators):

1. **No pooled connection is held across an outbound call, and no row lock either.** Work with a
   provider is claimed by one short conditional statement, the call is made with no connection
   checked out and no transaction open, and its result is written by another short conditional
   statement (see ``service/connections/refresh.py``). So a connection is busy only while
   PostgreSQL works, and a slow provider can never empty the pool.
2. **A lock wait ends before the statement does**: ``lock_timeout`` (5 s) < ``statement_timeout``
   (15 s), set for every session here. A statement blocked on a lock fails as SQLSTATE 55P03
   (``lock_not_available``), which names the cause, rather than as 57014 (``query_canceled``).
   No request-path statement raises its own ``lock_timeout``: the rows a request locks are held
   for milliseconds, so 5 s is already long. A command that must wait longer for a lock (key
   rotation) raises ``statement_timeout`` in the same transaction, above its ``lock_timeout``
   (``SET LOCAL`` both), so the rule holds there too.
3. **A request waiting for a connection outlives one slow statement**:
   ``db_pool_timeout_seconds`` (30 s) > ``statement_timeout``; past it the request gets 503 +
   ``Retry-After``.
4. **Outbound HTTP** (``service/http.py``): 15 s per phase, 5 s to connect; a token refresh also has
   an overall deadline of the same 15 s (``oauth.CALL_DEADLINE_SECONDS``).
5. **A refresh claim outlives the call it covers**: claim = call deadline + 5 s for the write
   (``REFRESH_CLAIM_SECONDS``, 20 s), so a claim never lapses while its call may still reach the
   provider — the condition for a rotating refresh token never being sent twice.
6. **A request waiting for another replica's refresh waits at most the claim** (20 s): by then the
   winner wrote its token or its claim lapsed. This stays under the client library's default
   timeout (30 s), so the token endpoint answers before its caller gives up.
7. **A server that stops answering is bounded by the client** (``CONNECT_TIMEOUT_SECONDS``, 5 s, to
   connect; ``COMMAND_TIMEOUT_SECONDS``, 40 s, per statement): above every ``statement_timeout`` a
   session sets, so while the server answers its own timeouts fire first.

Errors from these waits are told apart by SQLSTATE in ``service/db/errors.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import msgspec
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from service.db.direct import DirectStatements
from service.db.errors import SERVER_LOST, classify
from service.db.pool import StatementPool
from service.settings import Settings

# Connections older than this are replaced at checkout: below the idle timeouts of common NATs and
# load balancers (AWS NAT gateways drop idle flows after 350 s), which kill a socket silently.
POOL_RECYCLE_SECONDS = 300
# See "Timeouts" above: a lock wait ends (55P03) before the statement would be cancelled (57014).
LOCK_TIMEOUT_MS = 5_000
STATEMENT_TIMEOUT_MS = 15_000
# A server that stops answering (paused, or its host gone without a reset) never fires its own
# timeouts, so the client bounds the wait too: a connection attempt gives up after 5 s (asyncpg's
# default is 60 s), and a statement after 40 s, above the longest statement_timeout any session
# sets (key rotation's 35 s), so while the server answers its own timeout, which names the cause,
# always fires first. Without the second bound, connections stuck on a host that vanished would
# keep the pool full until TCP gives up (about 15 minutes on Linux).
CONNECT_TIMEOUT_SECONDS = 5
COMMAND_TIMEOUT_SECONDS = 40


# Behind PgBouncer < 1.21 in transaction mode, consecutive transactions may run on different server
# connections, so a statement prepared by name on one is missing (or already taken) on the next:
# no statement cache in asyncpg (the driver's key) or SQLAlchemy (the rest), and a fresh name for
# each prepared statement.
_UNCACHED_DRIVER: dict[str, Any] = {"statement_cache_size": 0}
_UNCACHED_DIALECT: dict[str, Any] = {
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": lambda: f"__elicitd_{uuid.uuid4().hex}__",
}


def driver_connect_args(settings: Settings) -> dict[str, Any]:
    """What ``asyncpg.connect`` is given besides the URL's parts, by the engine and the statement pool alike."""
    return {
        # A statement that hangs must not pin a waiter forever; lock waits fail fast too.
        "timeout": CONNECT_TIMEOUT_SECONDS,
        "command_timeout": COMMAND_TIMEOUT_SECONDS,
        "server_settings": {
            "statement_timeout": str(STATEMENT_TIMEOUT_MS),
            "lock_timeout": str(LOCK_TIMEOUT_MS),
            "application_name": "elicitd",
        },
        **({} if settings.db_statement_cache else _UNCACHED_DRIVER),
    }


def make_engine(settings: Settings) -> AsyncEngine:
    # No ``pool_pre_ping``: it is a round trip on every checkout (py-spy: ~12% of a resolve's CPU,
    # and one of the four round trips of a read). A connection the server closed (restart,
    # pg_terminate_backend, idle_session_timeout) is already known closed to asyncpg, which saw
    # the socket close: ``_discard_closed`` turns that into a new connection at checkout at no
    # cost. A socket that died silently is bounded by ``POOL_RECYCLE_SECONDS``; if one is still
    # used, SQLAlchemy invalidates the pool on the disconnect error and that one request fails.
    engine = create_async_engine(
        settings.database_url,
        # JSON columns (a flow's result, context, params) are decoded by msgspec, as every other
        # JSON in elicitd: the same values as ``json.loads``, in a third of the time.
        json_deserializer=msgspec.json.decode,
        # No overflow: under a burst, overflow connections are closed as soon as they are returned
        # and opened again for the next request (py-spy under wrk: ~9% of samples in
        # asyncpg.connect). A fixed pool queues requests instead, up to db_pool_timeout_seconds.
        pool_size=settings.db_pool_size,
        max_overflow=0,
        pool_timeout=settings.db_pool_timeout_seconds,
        pool_recycle=POOL_RECYCLE_SECONDS,
        connect_args={
            **driver_connect_args(settings),
            **({} if settings.db_statement_cache else _UNCACHED_DIALECT),
        },
    )
    event.listen(engine.sync_engine, "checkout", _discard_closed)
    event.listen(engine.sync_engine, "handle_error", _drop_lost_server)
    return engine


def make_statements(settings: Settings, engine: AsyncEngine) -> DirectStatements:
    """The hot path's statements, on a pool of their own beside ``engine``'s (``service.db.pool``):
    the same server and connection settings and wait bound, and JSON decoded by msgspec as the
    engine decodes it. At most ``db_statement_pool_size`` connections, opened when first needed."""
    url_args = engine.dialect.create_connect_args(engine.url)[1]
    for dialect_only in ("prepared_statement_cache_size", "prepared_statement_name_func", "async_creator_fn"):
        url_args.pop(dialect_only, None)
    arguments = {**url_args, **driver_connect_args(settings)}

    async def connect() -> asyncpg.Connection:
        connection: asyncpg.Connection = await asyncpg.connect(**arguments)
        try:
            await connection.set_type_codec(
                "json", encoder=str.encode, decoder=msgspec.json.decode, schema="pg_catalog", format="binary"
            )
            await connection.set_type_codec(
                "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
            )
        except BaseException:
            connection.terminate()
            raise
        return connection

    pool = StatementPool(
        connect,
        size=settings.db_statement_pool_size,
        timeout=settings.db_pool_timeout_seconds,
        recycle_seconds=POOL_RECYCLE_SECONDS,
    )
    return DirectStatements(pool)


def _jsonb_encode(text: str) -> bytes:
    return b"\x01" + text.encode()  # jsonb's binary format: a version byte, then the text


def _jsonb_decode(data: bytes) -> Any:
    return msgspec.json.decode(memoryview(data)[1:])


def _drop_lost_server(context: ExceptionContext) -> None:
    """Treat these errors as a disconnect: SQLAlchemy then closes the connection and replaces every
    other pooled one at its next checkout.

    A read-only error (25006) is what a primary demoted by a failover answers; its connections stay
    open, and without this the pool would keep sending writes to it until they were recycled
    (``POOL_RECYCLE_SECONDS``) — a failover would cost minutes of 503s instead of one.
    """
    if classify(context.original_exception) in SERVER_LOST:
        context.is_disconnect = True


def _discard_closed(dbapi_connection: Any, connection_record: Any, connection_proxy: Any) -> None:
    """The pool retries the checkout with a fresh connection when this raises ``DisconnectionError``."""
    driver = getattr(dbapi_connection, "driver_connection", None)
    if driver is not None and driver.is_closed():
        raise DisconnectionError("connection closed by the server")


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def make_read_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions for a lone ``SELECT``: autocommit, so no ``BEGIN``/``ROLLBACK`` round trips around it.

    One statement sees one snapshot with or without a transaction block; anything that writes, or
    reads twice and needs both reads to agree, uses ``make_sessionmaker``'s sessions instead.
    """
    return async_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)
