"""What a connection's token request, refresh or reconnect can be refused with.

Each is an ``ElicitdError`` with a stable ``code`` (the API's problem+json ``type``); none carries a
token or a provider's own text. ``database_busy`` turns a passing database condition into the one
503 every connection route answers with.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator

from sqlalchemy.exc import DBAPIError

from service.db.base import CONNECTION_ID
from service.db.errors import TRANSIENT, classify
from service.errors import Conflict, ReauthorizationRequired, ServiceUnavailable, UpstreamError

logger = logging.getLogger("elicitd.connections")

DB_RETRY_AFTER_SECONDS = 1


class InsufficientScope(Conflict):
    code = "insufficient_scope"
    title = "The connection lacks requested scopes"


class RefreshFailed(UpstreamError):
    code = "provider_refresh_failed"
    title = "The provider did not refresh the token"


class AuthorizationExceedsGrant(Conflict):
    code = "authorization_exceeds_grant"
    title = "The token holds scopes the grant does not"


class AccountMismatch(Conflict):
    code = "account_mismatch"
    title = "The provider answered for another account"


class NoRefreshToken(Conflict):
    code = "no_refresh_token"
    title = "The connection has no refresh token"


def reconnect_required(connection_id: uuid.UUID) -> ReauthorizationRequired:
    """The provider no longer takes this connection's tokens: only a person can bring it back."""
    return ReauthorizationRequired(
        "The provider no longer accepts this connection; create an oauth_connect flow to reconnect it.",
        extra={"connection_id": CONNECTION_ID.format(connection_id)},
    )


@contextlib.contextmanager
def database_busy() -> Iterator[None]:
    """A database error that passes (a lock wait that ran out, a failover, a dropped connection)
    is answered 503 + ``Retry-After``; nothing was written, so the caller may simply retry. Any
    other database error is not caught here."""
    try:
        yield
    except DBAPIError as exc:
        kind = classify(exc)
        if kind not in TRANSIENT:
            raise
        logger.warning("database briefly unavailable", extra={"code": str(kind)})
        raise ServiceUnavailable(
            "The database is briefly unavailable; retry shortly.",
            headers={"Retry-After": str(DB_RETRY_AFTER_SECONDS)},
        ) from None
