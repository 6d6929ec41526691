"""Database errors, told apart by SQLSTATE.

``except DBAPIError`` catches everything from a lock wait that ran out to a lost connection or a
bug in a statement, and code that handles it one way answers most of them wrongly ("another
refresh is taking long" for a dropped connection). Code that catches a database error asks
``classify`` what it was and handles only the kinds it means to; anything else is re-raised.

PostgreSQL names every error with a five-character SQLSTATE (Appendix A of its manual); asyncpg
puts it on the exception (``sqlstate``), and SQLAlchemy keeps asyncpg's exception as ``orig``.
Errors with no SQLSTATE are a lost connection when the socket or pool says so, or when asyncpg
finds the connection in a state no statement can start from (``InternalClientError``).
"""

from __future__ import annotations

import enum

from asyncpg.exceptions import InternalClientError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout


class DbError(enum.StrEnum):
    LOCK_NOT_AVAILABLE = "lock_not_available"  # 55P03: lock_timeout ran out (or NOWAIT)
    QUERY_CANCELED = "query_canceled"  # 57014: statement_timeout, or a cancel request
    SERIALIZATION = "serialization_failure"  # 40001
    DEADLOCK = "deadlock_detected"  # 40P01
    CONNECTION = "connection_exception"  # class 08, or the socket went away
    SHUTDOWN = "admin_shutdown"  # 57P01 admin / 57P02 crash shutdown / 57P03 cannot connect now
    READ_ONLY = "read_only_transaction"  # 25006: a replica, or a primary that was demoted
    TOO_MANY_CONNECTIONS = "too_many_connections"  # 53300
    POOL_TIMEOUT = "pool_timeout"  # no pooled connection within db_pool_timeout_seconds
    DATA = "data_exception"  # class 22: a value PostgreSQL refuses (the caller's input)
    INTEGRITY = "integrity_violation"  # class 23
    OTHER = "other"


_EXACT = {
    "55P03": DbError.LOCK_NOT_AVAILABLE,
    "57014": DbError.QUERY_CANCELED,
    "40001": DbError.SERIALIZATION,
    "40P01": DbError.DEADLOCK,
    "57P01": DbError.SHUTDOWN,
    "57P02": DbError.SHUTDOWN,
    "57P03": DbError.SHUTDOWN,
    "25006": DbError.READ_ONLY,
    "53300": DbError.TOO_MANY_CONNECTIONS,
}
_CLASSES = {"08": DbError.CONNECTION, "22": DbError.DATA, "23": DbError.INTEGRITY}

# Worth one retry a moment later: nothing was written, and the cause passes (a lock is released, a
# failover completes, a burst ends). Answered ``503`` + ``Retry-After`` where a request meets them.
TRANSIENT = frozenset(
    {
        DbError.LOCK_NOT_AVAILABLE,
        DbError.QUERY_CANCELED,
        DbError.SERIALIZATION,
        DbError.DEADLOCK,
        DbError.CONNECTION,
        DbError.SHUTDOWN,
        DbError.READ_ONLY,
        DbError.TOO_MANY_CONNECTIONS,
        DbError.POOL_TIMEOUT,
    }
)

# The server behind the connection is gone, shutting down, or no longer the primary: the connection
# must not go back to the pool, and the pool's other connections (same server) are suspect too.
SERVER_LOST = frozenset({DbError.CONNECTION, DbError.SHUTDOWN, DbError.READ_ONLY})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of ``exc`` or of the driver error it wraps, if there is one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(code, str) and len(code) == 5:
            return code
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return None


def _unusable_connection(exc: BaseException) -> bool:
    """asyncpg's ``InternalClientError`` in ``exc`` or the driver error it wraps.

    Seen when PostgreSQL shuts down: an idle pooled connection receives the server's FATAL
    "terminating connection" message, which puts its protocol in an error state; until the socket
    closes a moment later the connection still looks open, and a request that takes it fails with
    "cannot switch to state …; another operation is in progress" before its statement is sent."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, InternalClientError):
            return True
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return False


def classify(exc: BaseException) -> DbError | None:
    """What kind of database error ``exc`` is; None when it is not a database error at all."""
    if isinstance(exc, PoolTimeout):
        return DbError.POOL_TIMEOUT
    code = sqlstate(exc)
    if code is not None:
        return _EXACT.get(code) or _CLASSES.get(code[:2], DbError.OTHER)
    # OSError: refused, reset, unreachable, timed out, before PostgreSQL said anything.
    if isinstance(exc, OSError) or _unusable_connection(exc):
        return DbError.CONNECTION
    if isinstance(exc, DBAPIError):
        lost = exc.connection_invalidated or isinstance(exc.orig, OSError)
        return DbError.CONNECTION if lost else DbError.OTHER
    return None


def is_transient(exc: BaseException) -> bool:
    return classify(exc) in TRANSIENT
