"""One error tree: every error elicitd raises on purpose, each with a stable ``code`` callers can
switch on, a status and a title. ``service.problems`` maps it to RFC 9457 problem+json for APIs
and to an HTML page for browsers; this module imports no framework, so the kernel can raise it.

The ``detail`` is written for the caller and must never carry a secret: handlers build it from
constants and ids, never from values the user or a provider sent us.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from service.i18n import N_

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://elicitd.dev/problems/"


class Problem(msgspec.Struct):
    """The RFC 9457 body of every API error (for the OpenAPI document)."""

    type: str
    title: str
    status: int
    code: str
    detail: str


class ElicitdError(Exception):
    """Base of every error elicitd raises on purpose."""

    code: ClassVar[str] = "internal_error"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(
        self, detail: str | None = None, *, extra: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.extra = dict(extra or {})
        # A more precise code than the class's (e.g. Forbidden with "provider_not_allowed") names
        # the problem everywhere: in `code`, in the `type` URL and in the log line.
        self.problem_code: str = str(self.extra.pop("code", None) or self.code)
        self.headers = headers or {}

    def problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": PROBLEM_BASE + self.problem_code,
            "title": self.title,
            "status": self.status,
            "code": self.problem_code,
            "detail": self.detail,
        }
        body.update(self.extra)
        return body


class ConfigurationError(ElicitdError):
    code = "configuration_error"
    title = "Invalid configuration"


class InvalidRequest(ElicitdError):
    code = "invalid_request"
    status = 400
    title = N_("Invalid request")


class InvalidRequestState(ElicitdError):
    code = "invalid_request_state"
    status = 400
    title = "Invalid request state"


class RequestStateExpired(ElicitdError):
    code = "request_state_expired"
    status = 400
    title = "Request state expired"


class Unauthenticated(ElicitdError):
    code = "unauthenticated"
    status = 401
    title = N_("Authentication required")

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail or "A valid API key is required.", headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ElicitdError):
    code = "forbidden"
    status = 403
    title = N_("Forbidden")


class NotFound(ElicitdError):
    code = "not_found"
    status = 404
    title = N_("Not found")


class FlowNotFound(NotFound):
    code = "flow_not_found"
    title = "Flow not found"


class ConnectionNotFound(NotFound):
    code = "connection_not_found"
    title = "Connection not found"


class PaymentNotFound(NotFound):
    code = "payment_not_found"
    title = "Payment not found"


class ProviderNotFound(NotFound):
    code = "provider_not_found"
    title = "Provider not found"


class IssuerNotFound(NotFound):
    code = "issuer_not_found"
    title = "Issuer not found"


class NotConnected(NotFound):
    code = "not_connected"
    title = "Not connected"


class Conflict(ElicitdError):
    code = "conflict"
    status = 409
    title = N_("Conflict")


class FlowNotPending(Conflict):
    code = "flow_not_pending"
    title = N_("Flow is no longer pending")


class ReauthorizationRequired(Conflict):
    code = "reauthorization_required"
    title = "Reauthorization required"


class PayloadTooLarge(ElicitdError):
    code = "payload_too_large"
    status = 413
    title = N_("Request body too large")


class RateLimited(ElicitdError):
    code = "rate_limited"
    status = 429
    title = N_("Too many requests")

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(
            detail, headers={"Retry-After": str(max(1, retry_after))}, extra={"retry_after": max(1, retry_after)}
        )


class UpstreamError(ElicitdError):
    code = "upstream_error"
    status = 502
    title = N_("Upstream service failed")


class ServiceUnavailable(ElicitdError):
    code = "unavailable"
    status = 503
    title = N_("Service unavailable")
