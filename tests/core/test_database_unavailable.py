"""Which failures answer ``503 unavailable``: a database that cannot be reached or refuses for a
passing reason, found on the exception, the ones it was raised from, or every member of a group.
(The fault tests in ``tests/faults/`` show the answers themselves, against real outages.)"""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.db.errors import DbError
from service.problems import transient_database_error


def _db(orig: BaseException) -> DBAPIError:
    return DBAPIError("SELECT 1", None, orig)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ConnectionRefusedError(111, "refused"), DbError.CONNECTION),  # connect: nothing listens
        (ConnectionResetError(104, "reset"), DbError.CONNECTION),
        (TimeoutError(), DbError.CONNECTION),  # connect or command timeout: the server never answered
        (_db(asyncpg.exceptions.AdminShutdownError("terminating")), DbError.SHUTDOWN),
        (_db(asyncpg.exceptions.CannotConnectNowError("starting up")), DbError.SHUTDOWN),
        (_db(asyncpg.exceptions.ConnectionDoesNotExistError("closed")), DbError.CONNECTION),
        (_db(asyncpg.exceptions.ReadOnlySQLTransactionError("read-only")), DbError.READ_ONLY),
        (_db(asyncpg.exceptions.TooManyConnectionsError("too many")), DbError.TOO_MANY_CONNECTIONS),
        (_db(asyncpg.exceptions.LockNotAvailableError("lock")), DbError.LOCK_NOT_AVAILABLE),
        (PoolTimeout("QueuePool limit"), DbError.POOL_TIMEOUT),
        # A pooled connection that took the server's FATAL shutdown message while idle.
        (
            asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
            DbError.CONNECTION,
        ),
        (_db(asyncpg.exceptions.InternalClientError("cannot switch to state 12")), DbError.CONNECTION),
    ],
)
def test_passing_database_conditions_are_transient(exc: BaseException, kind: DbError) -> None:
    assert transient_database_error(exc) is kind


@pytest.mark.parametrize(
    "exc",
    [
        _db(asyncpg.exceptions.PostgresSyntaxError("syntax")),  # a bug in a statement
        _db(asyncpg.exceptions.UniqueViolationError("duplicate")),
        _db(asyncpg.exceptions.UntranslatableCharacterError("NUL")),  # bad input: a 400 elsewhere
        ValueError("not a database error"),
        KeyError("flow"),
    ],
)
def test_anything_else_is_not(exc: BaseException) -> None:
    assert transient_database_error(exc) is None


def test_the_cause_counts_and_a_database_bug_ends_the_search() -> None:
    wrapped = RuntimeError("while reading the flow")
    wrapped.__cause__ = ConnectionResetError(104, "reset")
    assert transient_database_error(wrapped) is DbError.CONNECTION

    bug = _db(asyncpg.exceptions.UndefinedColumnError("no column"))
    bug.__cause__ = ConnectionResetError(104, "reset")
    assert transient_database_error(bug) is None


def test_a_group_is_transient_only_when_every_member_is() -> None:
    lost = ConnectionRefusedError(111, "refused")
    assert transient_database_error(ExceptionGroup("reads", [lost, TimeoutError()])) is DbError.CONNECTION
    assert transient_database_error(ExceptionGroup("reads", [lost, ValueError("bug")])) is None
