"""Engine and session factory. Sessions are short: one unit of work, committed explicitly."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from service.settings import Settings

# Connections older than this are replaced at checkout: below the idle timeouts of common NATs and
# load balancers (AWS NAT gateways drop idle flows after 350 s), which kill a socket silently.
POOL_RECYCLE_SECONDS = 300


def make_engine(settings: Settings) -> AsyncEngine:
    # No ``pool_pre_ping``: it is a round trip on every checkout (py-spy: ~12% of a resolve's CPU,
    # and one of the four round trips of a read). A connection the server closed (restart,
    # pg_terminate_backend, idle_session_timeout) is already known closed to asyncpg, which saw
    # the socket close: ``_discard_closed`` turns that into a new connection at checkout at no
    # cost. A socket that died silently is bounded by ``POOL_RECYCLE_SECONDS``; if one is still
    # used, SQLAlchemy invalidates the pool on the disconnect error and that one request fails.
    engine = create_async_engine(
        settings.database_url,
        # No overflow: under a burst, overflow connections are closed as soon as they are returned
        # and opened again for the next request (py-spy under wrk: ~9% of samples in
        # asyncpg.connect). A fixed pool queues requests instead, up to db_pool_timeout_seconds.
        pool_size=settings.db_pool_size,
        max_overflow=0,
        pool_timeout=settings.db_pool_timeout_seconds,
        pool_recycle=POOL_RECYCLE_SECONDS,
        # A statement that hangs must not pin a waiter forever; lock waits fail fast too.
        connect_args={
            "server_settings": {"statement_timeout": "15000", "lock_timeout": "5000", "application_name": "elicitd"}
        },
    )
    event.listen(engine.sync_engine, "checkout", _discard_closed)
    return engine


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
