"""Exceptions of the elicitd client: one per stable problem+json ``code`` a caller acts on.

elicitd answers every error as RFC 9457 problem+json with a ``code`` that never changes meaning;
callers switch on the exception class (or on ``.code`` for codes this library does not know yet).
"""

from __future__ import annotations

from typing import Any


class ElicitdError(Exception):
    """An error answer from elicitd (or no answer at all, for ``ElicitdUnavailable``).

    ``code`` is the problem's stable code, ``status`` the HTTP status (0 when no response came),
    ``detail`` the human-readable text elicitd wrote for the caller (never a secret), and
    ``problem`` the whole problem+json body.
    """

    default_code = "error"

    def __init__(
        self, detail: str, *, code: str | None = None, status: int = 0, problem: dict[str, Any] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.status = status
        self.problem = problem or {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, detail={self.detail!r})"


class ElicitdUnavailable(ElicitdError):
    """elicitd could not be reached, or kept answering a 5xx that may pass (502, 504, 503 with
    ``Retry-After``), after every retry. ``code`` and ``status`` are the last answer's, if any."""

    default_code = "unavailable"


class ServerError(ElicitdError):
    """A 5xx answer that another attempt would not change, raised without retrying: a feature this
    elicitd does not offer (``payments_unavailable``, ``consent_unavailable``: a 503 without
    ``Retry-After``) or a fault on elicitd's side (``internal_error``). ``code`` says which."""

    default_code = "internal_error"


class Unauthenticated(ElicitdError):
    """The API key is missing, wrong, or revoked."""

    default_code = "unauthenticated"


class Forbidden(ElicitdError):
    """The server client may not do this (a provider it is not allowed, an issuer it does not trust)."""

    default_code = "forbidden"


class SubjectTokenRequired(Unauthenticated):
    """This server client must prove the subject, and the call carried no user access token: call
    from inside a tool of an MCP server whose token verifier is set, or pass ``subject_token``."""

    default_code = "subject_token_required"


class SubjectTokenInvalid(Forbidden):
    """The user's access token does not prove the subject the call names (expired, another user,
    another audience, not active at its issuer); ``problem["reason"]`` says which."""

    default_code = "subject_token_invalid"


class InvalidRequest(ElicitdError):
    default_code = "invalid_request"


class InvalidRequestState(ElicitdError):
    """The ``request_state`` was tampered with, or minted for another subject or server client."""

    default_code = "invalid_request_state"


class RequestStateExpired(InvalidRequestState):
    default_code = "request_state_expired"


class NotFound(ElicitdError):
    default_code = "not_found"


class FlowNotFound(NotFound):
    default_code = "flow_not_found"


class NotConnected(NotFound):
    """The subject has no connection to this provider (start an ``oauth_connect`` flow)."""

    default_code = "not_connected"


class Conflict(ElicitdError):
    default_code = "conflict"


class FlowNotPending(Conflict):
    """The flow already reached a terminal state; it cannot change again."""

    default_code = "flow_not_pending"


class ReauthorizationRequired(Conflict):
    """The provider refused the stored grant; a new ``oauth_connect`` flow reconnects it."""

    default_code = "reauthorization_required"


class InsufficientScope(Conflict):
    """The connection lacks some of the requested scopes; an ``oauth_connect`` flow for the union
    of scopes upgrades it."""

    default_code = "insufficient_scope"


class RateLimited(ElicitdError):
    default_code = "rate_limited"

    @property
    def retry_after(self) -> int | None:
        value = self.problem.get("retry_after")
        return int(value) if isinstance(value, int | float) else None


_BY_CODE: dict[str, type[ElicitdError]] = {
    cls.default_code: cls
    for cls in (
        Unauthenticated,
        Forbidden,
        SubjectTokenRequired,
        SubjectTokenInvalid,
        InvalidRequest,
        InvalidRequestState,
        RequestStateExpired,
        NotFound,
        FlowNotFound,
        NotConnected,
        Conflict,
        FlowNotPending,
        ReauthorizationRequired,
        InsufficientScope,
        RateLimited,
        ElicitdUnavailable,
        ServerError,
    )
}
_BY_STATUS: dict[int, type[ElicitdError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
}


def error_from_problem(status: int, problem: dict[str, Any]) -> ElicitdError:
    """Build the most specific exception for a problem+json answer (unknown codes keep their code)."""
    code = problem.get("code")
    code = code if isinstance(code, str) and code else None
    by_status = _BY_STATUS.get(status) or (ServerError if status >= 500 else ElicitdError)
    cls = (_BY_CODE.get(code) if code else None) or by_status
    detail = problem.get("detail") or problem.get("title") or f"elicitd answered HTTP {status}"
    return cls(str(detail), code=code or cls.default_code, status=status, problem=problem)
