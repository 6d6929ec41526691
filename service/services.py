"""``build_services(settings)``: the composition root.

Every long-lived object of a process is built here, once, in dependency order, each collaborator
passed through its constructor; nothing is set on an object after it is built. The web app
(``service.app.create_app``) and every CLI command start from the same ``Services``; a CLI never
builds a web app to reach a service.

Order matters only where one object needs another: the waiter hub reads finished flows straight
from the database (so it needs no flow service), metrics read the hub, the flow service tells
metrics and the webhook worker about transitions, and the kinds' own services sit on top of the
flow service: each kind's plugin builds them from the ``KindContext`` handed to every kind, so
nothing here names a kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from service.admin.quotas import FlowRateLimiter
from service.branding.service import BrandService
from service.clock import Clock, SystemClock
from service.connections.discovery import MetadataCache
from service.connections.key_probes import KeyProbes
from service.connections.probes import Prober, ProbeSettings
from service.connections.refresher import Refresher, RefreshSettings
from service.connections.repository import purge_states as purge_oauth_states
from service.connections.service import ConnectionService
from service.console.signin import ConsoleSignIn
from service.crypto.vault import Vault
from service.db.direct import DirectStatements
from service.db.engine import make_engine, make_read_sessionmaker, make_sessionmaker, make_statements
from service.events.hub import EventHub, EventSettings
from service.events.repository import stream_tail
from service.flows import repository as flow_repo
from service.flows.plugins import KindPlugin, MountedKind
from service.flows.request_state import RequestStateCodec
from service.flows.service import FlowService
from service.flows.sweeper import run_sweeper
from service.grants.service import GrantService
from service.http import make_http_client
from service.identity.issuers import IssuerDirectory
from service.identity.keys import ApiKeyAuthenticator
from service.identity.sessions import purge_expired as purge_expired_logins
from service.identity.subject_proof import SubjectProver
from service.kind_context import KindContext
from service.kinds import REGISTRY
from service.oauth.exchange import TokenExchange
from service.observability.metrics import Metrics
from service.observability.stalls import StallMonitor
from service.observability.tracing import Tracing, build_tracing
from service.settings import Settings, positive_extras
from service.signals.bus import WaiterHub
from service.signals.webhooks import WebhookSettings, WebhookWorker
from service.signin.gate import BrowserGate
from service.signin.service import LoginService
from service.signin.throttle import LoginThrottle

logger = logging.getLogger("elicitd")


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """Everything a request handler or a command may need, typed; built by ``build_services``."""

    settings: Settings
    clock: Clock
    engine: AsyncEngine
    direct: DirectStatements
    sessions: async_sessionmaker[AsyncSession]
    read_sessions: async_sessionmaker[AsyncSession]
    http: httpx.AsyncClient
    vault: Vault
    hub: WaiterHub
    metrics: Metrics
    stalls: StallMonitor
    tracing: Tracing
    webhooks: WebhookWorker
    events: EventHub
    authenticator: ApiKeyAuthenticator
    issuers: IssuerDirectory
    kinds: Mapping[str, MountedKind]
    flows: FlowService
    logins: LoginService
    gate: BrowserGate
    console: ConsoleSignIn
    connections: ConnectionService
    refresher: Refresher
    prober: Prober
    grants: GrantService
    brands: BrandService
    subjects: SubjectProver
    exchange: TokenExchange

    def __repr__(self) -> str:
        return f"Services(kinds={sorted(self.kinds)})"

    def kind(self, name: str, of: type[T]) -> T:
        """The services the ``name`` kind built, as the type its package built them as."""
        return self.kinds[name].serves(of)

    async def start(self) -> None:
        """Connect what needs connecting (the Redis subscription); watch the event loop."""
        await self.hub.start()
        self.stalls.start()

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """The upkeep a serving replica runs: expiry sweeps and chores, webhook delivery, proactive
        token refresh, connection health probes."""
        chores = [purge_expired_logins, purge_oauth_states, self.events.purge]
        return [
            run_sweeper(self.flows, self.settings.sweep_interval_seconds, chores),
            self.webhooks.run(),
            self.refresher.run(),
            self.prober.run(),
        ]

    @contextlib.asynccontextmanager
    async def upkeep(self) -> AsyncIterator[None]:
        """``background()`` running for the block (a serving replica's lifespan, ``elicitd
        worker``), then cancelled: cancelled tasks end at once, and one that ignores it is left
        behind after ``BACKGROUND_STOP_SECONDS`` rather than holding the stop."""
        tasks = [asyncio.create_task(job) for job in self.background()]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            stop_by = asyncio.get_running_loop().time() + BACKGROUND_STOP_SECONDS
            await bounded("background tasks", asyncio.gather(*tasks, return_exceptions=True), stop_by)

    async def aclose(self) -> None:
        """Release everything, in reverse order of need; safe to call once after ``start``.

        A stop must end: each step gets what is left of ``SHUTDOWN_SECONDS``, and one that has not
        finished by then is abandoned with a warning naming it (what it holds ends with the process).
        """
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_SECONDS
        await bounded("stall monitor", self.stalls.stop(), deadline)
        await bounded("event streams", self.events.aclose(), deadline)
        await bounded("redis", self.hub.stop(), deadline)
        self.tracing.shutdown()
        await bounded("issuers", self.issuers.close(), deadline)
        await bounded("token refreshes", self.connections.aclose(), deadline)
        await bounded("http client", self.http.aclose(), deadline)
        await bounded("postgres", self.engine.dispose(), deadline)
        await bounded("postgres statements", self.direct.close(), deadline)


T = TypeVar("T")

SHUTDOWN_SECONDS = 5.0
# What the app's background tasks (sweeper, webhook worker) get after their cancel, before the above.
BACKGROUND_STOP_SECONDS = 2.0


async def bounded(name: str, step: Awaitable[Any], deadline: float) -> None:
    """Run one shutdown step until ``deadline`` (loop time); past it, cancel it without waiting
    for it (a task that ignores its cancellation must not hold the stop) and say which it was."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
    if not done:
        task.cancel()
        logger.warning("shutdown step abandoned", extra={"dependency": name})
        return
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        logger.warning("shutdown step failed", extra={"dependency": name, "error_type": type(failure).__name__})


def load_plugins(settings: Settings, registry: Mapping[str, str] = REGISTRY) -> dict[str, KindPlugin]:
    """Each registered kind's plugin, built from its module; a plugin must carry its registered name."""
    plugins: dict[str, KindPlugin] = {}
    for name, module_name in registry.items():
        plugin: KindPlugin = importlib.import_module(module_name).plugin(settings)
        if plugin.name != name:
            raise RuntimeError(f"{module_name} builds the kind {plugin.name!r}, registered as {name!r}")
        plugins[name] = plugin
    return plugins


def mount_kinds(plugins: Mapping[str, KindPlugin], context: KindContext) -> dict[str, MountedKind]:
    """Each kind with the services its own factory builds from ``context`` (once, at start-up)."""
    return {
        name: MountedKind(
            plugin,
            None if plugin.services is None else plugin.services(context),
            None if plugin.probes is None else plugin.probes(context),
        )
        for name, plugin in plugins.items()
    }


def kind_probes(kinds: Mapping[str, MountedKind]) -> list[KeyProbes]:
    """The kinds' probes of the connections they store (each checked to be a ``KeyProbes``)."""
    found = []
    for name, kind in kinds.items():
        if kind.probes is None:
            continue
        if not isinstance(kind.probes, KeyProbes):
            raise TypeError(f"the {name} kind's probes are not a KeyProbes")
        found.append(kind.probes)
    return found


def build_services(settings: Settings, *, clock: Clock | None = None) -> Services:
    clock = clock or SystemClock()
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    read_sessions = make_read_sessionmaker(engine)
    http = make_http_client(settings.outbound_timeout_seconds)
    vault = Vault(settings.keys, accept_unbound=settings.accept_unbound_secrets)
    direct = make_statements(settings, engine)

    async def finished(ids: list[uuid.UUID]) -> list[uuid.UUID]:
        async with read_sessions() as session:
            return await flow_repo.FlowStatements.finished_among(session, ids)

    hub = WaiterHub(
        redis_url=settings.redis_url,
        channel=settings.redis_channel,
        shards=settings.redis_shards,
        poll_interval=settings.poll_interval_seconds,
        safety_poll_interval=max(settings.poll_interval_seconds * 10, 30.0),
        finished=finished,
        clock=clock,
    )
    metrics = Metrics(
        hub,
        clock=clock,
        **positive_extras(settings, "METRICS_", {"connection_count_seconds": float}),
    )
    events = EventHub(
        settings=EventSettings.from_settings(settings),
        read_sessions=read_sessions,
        sessions=sessions,
        hub=hub,
        vault=vault,
        clock=clock,
    )
    webhooks = WebhookWorker(
        settings=WebhookSettings.from_settings(settings),
        sessions=sessions,
        vault=vault,
        stream_tail=stream_tail,
        on_events=events.announce,
        on_outcome=metrics.webhook_outcome,
        clock=clock,
    )
    kinds = load_plugins(settings)
    issuers = IssuerDirectory(sessions, vault, http=http, clock=clock, read_sessions=read_sessions)
    subjects = SubjectProver(issuers, read_sessions, http=http, clock=clock)
    flows = FlowService(
        settings=settings,
        sessions=sessions,
        read_sessions=read_sessions,
        direct=direct,
        hub=hub,
        codec=RequestStateCodec(settings.keys, clock=clock),
        handlers={name: plugin.handler for name, plugin in kinds.items()},
        listeners=(metrics.flow_finished,),
        also_wakes=events.stream_of,
        on_webhook_queued=webhooks.wake,
        rate_limiter=FlowRateLimiter(on_limited=metrics.limited),
        subjects=subjects,
        clock=clock,
    )
    refreshing = RefreshSettings.from_settings(settings)
    connections = ConnectionService(
        sessions=sessions,
        read_sessions=read_sessions,
        direct=direct,
        vault=vault,
        metadata=MetadataCache(http=http, clock=clock, timeout=settings.outbound_timeout_seconds),
        http=http,
        clock=clock,
        expiring_seconds=refreshing.expiring_seconds,
        refreshed_events=refreshing.events,
        on_refresh=metrics.record_refresh,
        on_events=events.announce,
    )
    authenticator = ApiKeyAuthenticator(sessions, settings.api_key_cache_seconds, clock=clock)
    logins = LoginService(
        settings=settings,
        sessions=sessions,
        vault=vault,
        issuers=issuers,
        flows=flows,
        http=http,
        throttle=LoginThrottle(clock=clock),
    )
    gate = BrowserGate(settings=settings, issuers=issuers, flows=flows, logins=logins)
    console = ConsoleSignIn(settings=settings, sessions=sessions, vault=vault, issuers=issuers, http=http, clock=clock)
    grants = GrantService(
        sessions=sessions,
        read_sessions=read_sessions,
        flows=flows,
        connections=connections,
        vault=vault,
        on_events=events.announce,
    )
    brands = BrandService(sessions)
    context = KindContext(
        settings=settings,
        clock=clock,
        sessions=sessions,
        read_sessions=read_sessions,
        http=http,
        vault=vault,
        flows=flows,
        gate=gate,
        issuers=issuers,
        connections=connections,
        grants=grants,
        brands=brands,
    )
    mounted = mount_kinds(kinds, context)
    return Services(
        settings=settings,
        clock=clock,
        engine=engine,
        direct=direct,
        sessions=sessions,
        read_sessions=read_sessions,
        http=http,
        vault=vault,
        hub=hub,
        metrics=metrics,
        stalls=StallMonitor(metrics.registry),
        tracing=build_tracing(settings),
        webhooks=webhooks,
        events=events,
        authenticator=authenticator,
        issuers=issuers,
        kinds=mounted,
        flows=flows,
        logins=logins,
        gate=gate,
        console=console,
        connections=connections,
        refresher=Refresher(connections, refreshing, clock=clock),
        prober=Prober(
            connections,
            ProbeSettings.from_settings(settings),
            clock=clock,
            on_probe=metrics.record_probe,
            kinds=kind_probes(mounted),
        ),
        grants=grants,
        brands=brands,
        subjects=subjects,
        exchange=TokenExchange(
            authenticator=authenticator,
            subjects=subjects,
            connections=connections,
            public_url=settings.public_url,
            clock=clock,
        ),
    )


@contextlib.asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """For commands: the services, started, and closed on the way out (no web app, no upkeep)."""
    services = build_services(settings)
    try:
        await services.start()
        yield services
    finally:
        await services.aclose()
