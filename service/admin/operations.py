"""Wires the operating side into an app: admin API, metrics, request logs and tracing, the
webhook worker and the shared rate limiter. ``create_app`` calls ``Operations.install`` once and
gets back the routes to mount, the background tasks to run and an ASGI wrapper."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.openapi.spec import SecurityScheme

from service.admin.api import admin_router
from service.admin.quotas import FlowRateLimiter
from service.observability.metrics import Metrics, metrics_endpoint
from service.observability.requests import RequestObserver
from service.observability.tracing import Tracing, build_tracing
from service.settings import Settings
from service.signals.webhooks import WebhookSettings, WebhookWorker

ADMIN_SECURITY_SCHEME = SecurityScheme(
    type="http", scheme="bearer", description="An admin token (eat_…), made with `elicitd admin tokens create`"
)


class Operations:
    def __init__(self, settings: Settings, state: State) -> None:
        self.settings = settings
        self.state = state
        self.metrics = Metrics(state.hub)
        self.tracing: Tracing = build_tracing(settings)
        self.webhooks = WebhookWorker(
            settings=WebhookSettings.from_settings(settings),
            sessions=state.sessions,
            vault=state.vault,
            on_outcome=self.metrics.webhook_outcome,
        )

    @classmethod
    def install(cls, settings: Settings, state: State) -> Operations:
        ops = cls(settings, state)
        state.metrics = ops.metrics
        state.tracing = ops.tracing
        state.webhooks = ops.webhooks
        flows = state.flows
        flows.listeners.append(ops.metrics.flow_finished)
        flows.listeners.append(ops.webhooks.wake)
        flows.rate_limiter = FlowRateLimiter(on_limited=ops.metrics.limited)
        connections = getattr(state, "connections", None)
        if connections is not None:
            connections.on_refresh = ops.metrics.record_refresh
        return ops

    def route_handlers(self, extra_admin: list[Any] | None = None) -> list[Any]:
        return [admin_router(extra_admin), metrics_endpoint]

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self.webhooks.run()]

    def start(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(c) for c in self.background()]

    def wrap(self, app: Litestar) -> Litestar:
        """Observe every request, routed or not (``asgi_handler`` is the outermost handler)."""
        app.asgi_handler = RequestObserver(app.asgi_handler, metrics=self.metrics, tracing=self.tracing)
        return app

    def shutdown(self) -> None:
        self.tracing.shutdown()
