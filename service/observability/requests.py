"""One JSON log event, one metrics sample and (when tracing is on) one span per HTTP request.

It wraps the whole ASGI handler, outside routing, so it also sees requests that match no route
(``route="unmatched"``). The route is the *template* (``/v1/flows/{flow_id:str}``): metric labels
never carry ids, and neither the log line nor a label ever carries a query string or body, which
may hold codes or tokens. When the request concerns a flow, ``FlowService`` tags it
(``service.observability.context``) and the log line carries the flow id, server client, kind and
outcome as separate fields.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from service.logs import log_fields
from service.observability.context import close_request, open_request
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

logger = logging.getLogger("elicitd.requests")

ASGIApp = Any

# The scope key under which the observer takes a deferred answer (``defer``).
_DEFERRED = "elicitd.deferred"


class Deferred(Protocol):
    """An answer that waits, run by the observer after the application has returned: ``wait()``
    is awaited, then ``close()`` is called (whatever happened), then ``answer()`` is awaited with
    what the wait returned, or the exception it raised."""

    def wait(self) -> Awaitable[Any]: ...

    def close(self) -> None: ...

    def answer(self, outcome: Any, scope: Any, receive: Any, send: Any) -> Awaitable[None]: ...


def defer(scope: Any, answer: Deferred) -> None:
    """Have the observer run ``answer`` once the application has returned, instead of the caller
    waiting where it is.

    A long-poll's answer may wait for minutes. Waited for from the route, everything between the
    observer and the route (the framework's router and exception handling, their frames and
    closures) stays alive for the whole wait, per parked request; waited for from here, only the
    wait's own frames do, and the answer is made only once the wait is over. The answer handles
    its own errors: the framework's exception handling has returned by the time it runs."""
    if scope.get(_DEFERRED, False) is not None:
        raise RuntimeError("defer() needs the request observer around the application, once per request")
    scope[_DEFERRED] = answer


class _Capture:
    """The ``send`` the application gets: passes each message on, keeping the status it answered."""

    __slots__ = ("send", "status")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)


class _Traced:
    """What a request's span needs, taken once when tracing is on: a process with it off never
    imports OpenTelemetry's tracing API, and no request imports anything."""

    __slots__ = ("error", "kind", "tracer")

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.tracer = tracer
        self.kind = SpanKind.SERVER
        self.error = Status(StatusCode.ERROR)  # immutable: one for every failed request's span


class RequestObserver:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, tracing: Tracing) -> None:
        self.app = app
        self.metrics = metrics
        self.tracing = tracing
        self._traced = _Traced(tracing.tracer) if tracing.tracer is not None else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope.get("method", "GET")
        capture = _Capture(send)

        fields, context_token = open_request()
        span = None
        traced = self._traced
        if traced is not None:
            span = traced.tracer.start_span(
                f"HTTP {method}", kind=traced.kind, attributes={"http.request.method": method}
            )
        scope[_DEFERRED] = None
        try:
            await self.app(scope, receive, capture)
            deferred: Deferred | None = scope.pop(_DEFERRED, None)
            if deferred is not None:
                try:
                    outcome = await deferred.wait()
                except Exception as failed:  # the answer turns it into the application's error response
                    outcome = failed
                finally:
                    deferred.close()
                await deferred.answer(outcome, scope, receive, capture)
        finally:
            status = capture.status
            route = scope.get("path_template") or "unmatched"
            seconds = time.perf_counter() - started
            if route != "/metrics":
                self.metrics.request(method, route, status, seconds)
            if traced is not None and span is not None:
                # The span's name uses the template too, so trace backends group by route.
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(traced.error)
                span.end()
            close_request(context_token)
            log_fields(
                logger,
                logging.INFO,
                "request",
                {**fields, "method": method, "route": route, "status": status, "duration_ms": round(seconds * 1000, 2)},
            )
