"""The error tree (``service.errors``) as answers: RFC 9457 problem+json for APIs, an HTML page
for browsers, and the exception handlers that make them, Litestar's own errors and the
database's included.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Template
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.db.errors import TRANSIENT, DbError, classify
from service.errors import (
    PROBLEM_BASE,
    PROBLEM_JSON,
    ElicitdError,
    InvalidRequest,
    Problem,
    ServiceUnavailable,
)
from service.i18n import N_, _

logger = logging.getLogger("elicitd.errors")

_PROBLEM_TEXT = {
    400: "Invalid request, request state or parameters (`invalid_request`, `invalid_request_state`, …)",
    401: "Missing or invalid API key (`unauthenticated`), or no subject token (`subject_token_required`)",
    403: "Not allowed for this server client (`forbidden`, `provider_not_allowed`, `issuer_not_trusted`, "
    "`subject_token_invalid`)",
    404: "Unknown, or belongs to another server client (`flow_not_found`, `not_connected`)",
    409: "The flow is no longer pending, or the connection needs reauthorization",
    413: "The request body exceeds the configured limit (`payload_too_large`)",
    429: "Over a rate limit or quota (`rate_limited`, with `Retry-After`)",
    503: "Temporarily unavailable (`unavailable`, with `Retry-After`)",
}


def problem_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the problem+json answers a route can give."""
    return {
        status: ResponseSpec(
            data_container=Problem, description=_PROBLEM_TEXT[status], media_type=PROBLEM_JSON, generate_examples=False
        )
        for status in statuses
    }


_LITESTAR_CODES: dict[int, tuple[str, str]] = {
    400: ("invalid_request", N_("Invalid request")),
    401: ("unauthenticated", N_("Authentication required")),
    403: ("forbidden", N_("Forbidden")),
    404: ("not_found", N_("Not found")),
    405: ("method_not_allowed", N_("Method not allowed")),
    413: ("payload_too_large", N_("Request body too large")),
    415: ("unsupported_media_type", N_("Unsupported media type")),
    429: ("rate_limited", N_("Too many requests")),
}


_BROWSER_PREFIXES = ("/f/", "/auth/", "/connect/", "/consent/", "/pay/", "/me/", "/console/")


def is_browser_path(path: str) -> bool:
    """Browser pages live under /f/, /auth/, /connect/, /me … and answer errors with an HTML page;
    everything else is an API (problem+json). The OpenAPI document follows the same rule."""
    return path == "/me" or path.startswith(_BROWSER_PREFIXES)


def _wants_html(request: Request[Any, Any, Any]) -> bool:
    return is_browser_path(request.url.path) or (
        request.url.path == "/" and "text/html" in request.headers.get("accept", "")
    )


def _problem_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(content=body, status_code=status, media_type=PROBLEM_JSON, headers=headers or {})


def _html_response(status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> Response[Any]:
    merged = {"Cache-Control": "no-store", **(headers or {})}
    # A person reads this page: the title and a fixed detail in their language where the catalogue
    # has them (every error a browser page can raise is marked for it), else as written.
    return Template(
        template_name="error.html",
        context={"title": _(title), "detail": _(detail) if detail else detail, "status": status},
        status_code=status,
        media_type=MediaType.HTML,
        headers=merged,
    )


def handle_elicitd_error(request: Request[Any, Any, Any], exc: ElicitdError) -> Response[Any]:
    if exc.status >= 500:
        # A plain 500 (internal_error, configuration_error) is a bug or a broken deployment: keep
        # its stack. 502/503 are expected conditions with their own code; the code says enough.
        logger.error(
            "request failed",
            extra={"code": exc.problem_code, "path": request.url.path},
            exc_info=exc if exc.status == 500 else None,
        )
    return _error_response(request, exc)


def _error_response(request: Request[Any, Any, Any], exc: ElicitdError) -> Response[Any]:
    if _wants_html(request):
        return _html_response(exc.status, exc.title, exc.detail, exc.headers)
    return _problem_response(exc.status, exc.problem(), exc.headers)


def handle_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """Litestar's own errors (routing, validation, body limits) in the same problem+json shape."""
    status = exc.status_code
    code, title = _LITESTAR_CODES.get(status, ("http_error", "Request failed"))
    if isinstance(exc, ValidationException):
        detail = _validation_detail(exc)
    elif isinstance(exc, NotFoundException):
        detail = N_("No such resource.")
    elif isinstance(exc, MethodNotAllowedException):
        detail = N_("This method is not allowed here.")
    elif isinstance(exc, NotAuthorizedException | PermissionDeniedException):
        detail = title
    elif status == 413:
        detail = N_("The request body exceeds the configured limit.")
    else:
        detail = title
    headers = dict(exc.headers or {})
    if _wants_html(request):
        return _html_response(status, title, detail, headers)
    return _problem_response(
        status, {"type": PROBLEM_BASE + code, "title": title, "status": status, "code": code, "detail": detail}, headers
    )


def _validation_detail(exc: ValidationException) -> str:
    """Keep msgspec's message (it names the field), never the offending value."""
    extra = exc.extra
    if isinstance(extra, list) and extra:
        first = extra[0]
        if isinstance(first, dict):
            message = str(first.get("message", "")).strip()
            key = first.get("key")
            if message:
                return f"{message}" + (f" (at {key})" if key and str(key) not in message else "")
    return "The request body or parameters are not valid."


def handle_database_error(request: Request[Any, Any, Any], exc: DBAPIError) -> Response[Any]:
    """PostgreSQL refusing a *value* (SQLSTATE class 22: a NUL character, a number out of range) is
    the caller's bad input, not our failure: 400. The transaction was rolled back, so nothing was
    written. A passing condition (``service.db.errors.TRANSIENT``) is 503; anything else is
    unexpected."""
    if classify(exc) is DbError.DATA:
        return handle_elicitd_error(
            request, InvalidRequest("The request holds a value that cannot be stored (for example a NUL character).")
        )
    return handle_unexpected(request, exc)


def handle_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """One log record with the stack (the formatter writes the types and frames of the whole
    chain but no exception's text, which may hold SQL parameters or provider bodies), and a
    generic 500 to the caller: never a detail, a type name or a stack.

    Unless the database could not be reached or refused for a passing reason: that is
    ``503 unavailable`` with ``Retry-After`` (``dependency_unavailable``)."""
    kind = transient_database_error(exc)
    if kind is not None:
        return dependency_unavailable(request, kind)
    logger.error("unhandled error", extra={"code": "internal_error", "path": request.url.path}, exc_info=exc)
    return _error_response(request, ElicitdError("Something went wrong on our side."))


# A client that retries after one second meets a pool that has already replaced its connections
# (the pool reconnects at the next checkout) or a lock that has long been released; a longer wait
# would only stretch an outage the client sees past the moment PostgreSQL is back.
RETRY_AFTER_SECONDS = 1


def transient_database_error(exc: BaseException) -> DbError | None:
    """The passing database condition behind ``exc``, or None.

    Looks at ``exc`` and the exceptions it was explicitly raised from (``raise … from``), and at
    every member of an exception group (all must be transient). A database error of any other
    kind ends the search: a bug in a statement stays a 500 even when a lost connection preceded it.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            kinds = [transient_database_error(member) for member in current.exceptions]
            return kinds[0] if kinds and all(kind is not None for kind in kinds) else None
        kind = classify(current)
        if kind is not None:
            return kind if kind in TRANSIENT else None
        current = current.__cause__
    return None


def dependency_unavailable(request: Request[Any, Any, Any], kind: DbError) -> Response[Any]:
    """``503 unavailable`` + ``Retry-After``: problem+json on the APIs, a "try again" page in a browser.

    Nothing the request asked for was acknowledged, so a retry is safe; a write whose commit
    reached PostgreSQL just before the connection dropped is found by the retry (flow
    transitions are conditional and creations converge on the pending flow)."""
    logger.warning(
        "database unavailable", extra={"code": "unavailable", "reason": kind.value, "path": request.url.path}
    )
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if kind is DbError.POOL_TIMEOUT:
        detail = "The service is busy; retry shortly."
    else:
        detail = "The service cannot reach its database right now; retry shortly."
    if _wants_html(request):
        return _html_response(
            503,
            "Try again in a moment",
            "This page could not be loaded just now. Nothing is wrong with your request: reload the page in a moment.",
            headers,
        )
    exc = ServiceUnavailable(detail, headers=headers, extra={"retry_after": RETRY_AFTER_SECONDS})
    return _problem_response(exc.status, exc.problem(), exc.headers)


def handle_pool_timeout(request: Request[Any, Any, Any], exc: PoolTimeout) -> Response[Any]:
    """Every pooled connection stayed busy past ``db_pool_timeout_seconds``: a burst, not a bug.

    The request did nothing yet (it never got a connection), so retrying it is safe: 503 with
    ``Retry-After`` tells well-behaved clients to back off briefly instead of reporting a failure.
    """
    return dependency_unavailable(request, DbError.POOL_TIMEOUT)


EXCEPTION_HANDLERS: dict[type[Exception] | int, Any] = {
    ElicitdError: handle_elicitd_error,
    HTTPException: handle_http_exception,
    DBAPIError: handle_database_error,
    PoolTimeout: handle_pool_timeout,
    Exception: handle_unexpected,
}


def response_for(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The response the request's exception handlers give ``exc``, for an answer made after
    Litestar's own exception handling has returned (a parked long-poll's, ``service.flows.api``):
    the handlers its route resolves (the application's, and any of its router or controller),
    chosen by Litestar's own rule."""
    # Litestar exports its handler lookup only from its internal exception middleware; the
    # version is pinned (constraints.txt) and tests/flows/test_api.py answers through this path.
    from litestar.middleware._internal.exceptions.middleware import get_exception_handler

    handler = get_exception_handler(request.route_handler.resolve_exception_handlers(), exc)
    answer: Response[Any] = (handler or handle_unexpected)(request, exc)
    return answer
