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
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode

from service.observability.context import close_request, open_request
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

logger = logging.getLogger("elicitd.requests")

ASGIApp = Any


class RequestObserver:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, tracing: Tracing) -> None:
        self.app = app
        self.metrics = metrics
        self.tracing = tracing

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        method = scope.get("method", "GET")

        async def capture(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        fields, context_token = open_request()
        span = None
        if self.tracing.tracer is not None:
            span = self.tracing.tracer.start_span(
                f"HTTP {method}", kind=SpanKind.SERVER, attributes={"http.request.method": method}
            )
        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("path_template") or "unmatched"
            seconds = time.perf_counter() - started
            if route != "/metrics":
                self.metrics.request(method, route, status, seconds)
            if span is not None:
                # The span's name uses the template too, so trace backends group by route.
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
            close_request(context_token)
            if logger.isEnabledFor(logging.INFO):
                logger.info(
                    "request",
                    extra={
                        **fields,
                        "method": method,
                        "route": route,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 2),
                    },
                )
