"""Prometheus metrics, one ``CollectorRegistry`` per app (two apps in one process never collide).

Counters are fed by the request middleware, ``FlowService.listeners`` (after commit), the webhook
worker and the rate limiter; gauges that live elsewhere (waiters, Redis mode) are read at scrape
time, and the webhook backlog is counted in PostgreSQL when ``/metrics`` is scraped so every
replica reports the same, exact number.

Other domains record through this object, given to them by ``build_services``; e.g. the token
refresh path calls ``record_refresh(provider, outcome)`` with outcome one of
``refreshed``, ``failed``, ``reauthorization_required`` (any short constant is accepted).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Protocol

from litestar import Response, get
from litestar.params import Dependency
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import text

from service.clock import Clock, SystemClock
from service.signals.bus import WaiterHub

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.observability.stalls import StallMonitor

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_COMPLETION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400)


class FinishedFlow(Protocol):
    """What ``flow_finished`` reads of a flow (``service.flows.repository.FlowFields`` has it all):
    declared here, so metrics depend on no domain's model."""

    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def completed_at(self) -> datetime | None: ...


# How long a replica serves the connection counts it last counted (``ELICITD_METRICS_CONNECTION_COUNT_SECONDS``).
CONNECTION_COUNT_SECONDS = 30.0
_COUNT_CONNECTIONS = text("SELECT provider, health, count(*) FROM connections GROUP BY provider, health ORDER BY 1, 2")


class Metrics:
    def __init__(
        self, hub: WaiterHub, *, clock: Clock | None = None, connection_count_seconds: float = CONNECTION_COUNT_SECONDS
    ) -> None:
        self.clock = clock or SystemClock()
        # Counting connections reads every row (about 65 ms at 100,000: docs/operating.md): a
        # replica counts at most once per this many seconds, one scrape at a time, and scrapes in
        # between serve the last count. Prometheus scrapes every 15-60 s, often from two servers.
        self.connection_count_seconds = connection_count_seconds
        self._counted_until: float | None = None
        self._counting = asyncio.Lock()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        # (kind, outcome) -> the two children ``flow_finished`` feeds: a sweep announces hundreds
        # of expiries at once, and ``labels()`` per flow was most of the ~14 µs each cost.
        self._flow_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self.requests = Counter(
            "elicitd_http_requests",
            "HTTP requests answered, by route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "elicitd_http_request_duration_seconds",
            "Time to answer an HTTP request.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flows_finished = Counter(
            "elicitd_flows_finished", "Terminal flow transitions made by this replica.", ["kind", "outcome"], registry=r
        )
        self.time_to_complete = Histogram(
            "elicitd_flow_time_to_complete_seconds",
            "Time from creation to the terminal transition.",
            ["kind", "outcome"],
            buckets=_COMPLETION_BUCKETS,
            registry=r,
        )
        self.waiters = Gauge("elicitd_waiters", "Requests of this replica waiting for a flow to finish.", registry=r)
        self.waiters.set_function(lambda: hub.waiter_count)
        self.fallback = Gauge(
            "elicitd_redis_fallback", "1 while wake-ups run on polling (Redis unavailable).", registry=r
        )
        self.fallback.set_function(lambda: 0 if hub.healthy else 1)
        self.webhook_backlog = Gauge(
            "elicitd_webhook_backlog", "Webhook events neither delivered nor abandoned (all replicas).", registry=r
        )
        self.webhook_deliveries = Counter(
            "elicitd_webhook_deliveries",
            "Webhook delivery attempts by result (delivered, failed, abandoned).",
            ["outcome"],
            registry=r,
        )
        self.refreshes = Counter(
            "elicitd_token_refreshes",
            "Provider token refreshes by provider and outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.probes = Counter(
            "elicitd_connection_probes",
            "Health probes of connections by provider and outcome (ok, needs_reauthorization, refreshed, unknown, "
            "skipped).",
            ["provider", "outcome"],
            registry=r,
        )
        self.rate_limited = Counter(
            "elicitd_rate_limited", "Requests refused by a per-client quota.", ["quota"], registry=r
        )
        self.overloaded = Counter(
            "elicitd_overloaded",
            "Requests refused 503 overloaded: the replica was at ELICITD_MAX_IN_FLIGHT short requests.",
            registry=r,
        )
        # Counted in the database (all replicas'), at most once a window (``count_connections``);
        # no subject or account labels.
        self.connections = Gauge(
            "elicitd_connections",
            "Connections by provider and health (healthy, expiring, needs_reauthorization, revoked).",
            ["provider", "health"],
            registry=r,
        )

    def connection_counts(self, counts: list[tuple[str, str, int]]) -> None:
        """The gauge from one count per (provider, health); a pair no longer counted drops out."""
        self.connections.clear()
        for provider, health, count in counts:
            self.connections.labels(provider=provider, health=health).set(count)

    async def count_connections(self, read_sessions: async_sessionmaker[AsyncSession]) -> None:
        """Count connections into the gauge unless this replica counted within the window (single
        flight: scrapes arriving during a count wait for it instead of counting again)."""
        if self._fresh():
            return
        async with self._counting:
            if self._fresh():
                return
            async with read_sessions() as session:
                rows = (await session.execute(_COUNT_CONNECTIONS)).all()
            self.connection_counts([(row[0], row[1], int(row[2])) for row in rows])
            self._counted_until = self.clock.monotonic() + self.connection_count_seconds

    def _fresh(self) -> bool:
        return self._counted_until is not None and self.clock.monotonic() < self._counted_until

    # ---- hooks for other modules -----------------------------------------------------------------
    def flow_finished(self, flow: FinishedFlow) -> None:
        """A ``FlowService`` listener: runs after the transition committed."""
        key = (flow.kind, flow.status)
        children = self._flow_children.get(key)
        if children is None:  # kinds x terminal statuses: a handful of entries
            labels = {"kind": flow.kind, "outcome": flow.status}
            children = self._flow_children[key] = (
                self.flows_finished.labels(**labels),
                self.time_to_complete.labels(**labels),
            )
        children[0].inc()
        if flow.completed_at is not None and flow.created_at is not None:
            children[1].observe(max(0.0, (flow.completed_at - flow.created_at).total_seconds()))

    def record_refresh(self, provider: str, outcome: str) -> None:
        self.refreshes.labels(provider=provider, outcome=outcome).inc()

    def record_probe(self, provider: str, outcome: str) -> None:
        self.probes.labels(provider=provider, outcome=outcome).inc()

    def webhook_outcome(self, outcome: str) -> None:
        self.webhook_deliveries.labels(outcome=outcome).inc()

    def limited(self, quota: str) -> None:
        self.rate_limited.labels(quota=quota).inc()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        # Every request lands here: the labelled children are looked up once per (method, route,
        # status), not through ``labels()`` (argument checks, a lock, a tuple) on every call.
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = (
                self.requests.labels(method=method, route=route, status=str(status)),
                self.latency.labels(method=method, route=route),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)


class MetricsServices(Protocol):
    """The parts of the container ``/metrics`` reads: the counters, the stall monitor, and a read
    session for the gauges counted in PostgreSQL."""

    @property
    def metrics(self) -> Metrics: ...

    @property
    def read_sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def stalls(self) -> StallMonitor: ...


# The ``services`` dependency as MetricsServices (see ``service.flows.deps``).
MetricsDeps = Annotated[MetricsServices, Dependency(skip_validation=True)]


@get(
    "/metrics",
    operation_id="metrics",
    tags=["ops"],
    summary="Prometheus metrics",
    include_in_schema=True,
    media_type=CONTENT_TYPE_LATEST,
)
async def metrics_endpoint(services: MetricsDeps) -> Response[bytes]:
    # One dependency, not three: Litestar resolves independent dependencies concurrently, a task
    # each (see ``service.identity.deps``).
    metrics, stalls = services.metrics, services.stalls
    async with services.read_sessions() as session:
        backlog = (
            await session.execute(
                text("SELECT count(*) FROM webhook_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL")
            )
        ).scalar_one()
    metrics.webhook_backlog.set(backlog)
    await metrics.count_connections(services.read_sessions)
    stalls.publish_max()
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
