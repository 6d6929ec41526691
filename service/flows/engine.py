"""The flow engine: create-or-reuse, reads, terminal transitions and the sweep's batches.

The engine owns each unit of work: it opens a session, runs single-statement changes through the
repository's statements (``FlowStatements``), commits, and only then publishes wake-ups (a waiter
must never be woken for a change it cannot yet read). The answers to an MCP server's calls that
may wait are ``service.flows.service.FlowService``'s; their wire shapes are ``service.flows.wire``.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.db.base import CLIENT_ID, FLOW_ID, uuid7
from service.db.direct import DirectStatements
from service.db.unit import unit_of_work
from service.errors import FlowNotFound, FlowNotPending, InvalidRequest, RateLimited
from service.flows.kinds import KindHandler, NormalizedFlow, check_issuer_trusted
from service.flows.models import Flow
from service.flows.repository import FlowFields, FlowStatements, Moved, Transition
from service.flows.request_state import RequestStateCodec
from service.flows.schemas import CreateFlowRequest, CreateFlowResponse, Subject
from service.flows.states import Actor, FlowStatus
from service.flows.wire import FlowWire, tag_flow
from service.identity.keys import AuthenticatedClient
from service.identity.models import ServerClient
from service.observability.context import tag
from service.settings import Settings
from service.signals.bus import WaiterHub

logger = logging.getLogger("elicitd.flows")

TransitionListener = Callable[[FlowFields], None]
# Raises RateLimited when the client may not create another flow now (one conditional statement).
RateLimiter = Callable[[AsyncSession, AuthenticatedClient], Awaitable[None]]


class SubjectCheck(Protocol):
    """``service.identity.subject_proof.SubjectProver``: refuses the call unless ``token`` proves
    that ``iss`` + ``sub`` is the user calling (a client whose policy is ``none`` is not asked)."""

    async def prove(self, client: AuthenticatedClient, *, iss: str, sub: str, token: str | None) -> None: ...


class UnitOfWork:
    """A session plus the flows it moved; ``FlowEngine.unit_of_work`` commits then publishes."""

    def __init__(self, session: AsyncSession, statements: FlowStatements) -> None:
        self.session = session
        self.statements = statements
        self.moved: list[Moved[Flow]] = []

    async def transition(self, flow_id: uuid.UUID, change: Transition, **kwargs: Any) -> Flow | None:
        moved = await self.statements.transition(self.session, flow_id, change, **kwargs)
        if moved is None:
            return None
        self.moved.append(moved)
        return moved.flow

    async def event(
        self, flow_id: uuid.UUID, event_type: str, actor: Actor, detail: dict[str, Any] | None = None
    ) -> None:
        await self.statements.add_event(self.session, flow_id, event_type, actor, detail)


class FlowEngine:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        hub: WaiterHub,
        codec: RequestStateCodec,
        handlers: Mapping[str, KindHandler],
        read_sessions: async_sessionmaker[AsyncSession] | None = None,
        direct: DirectStatements,
        listeners: Sequence[TransitionListener] = (),
        also_wakes: Callable[[FlowFields], uuid.UUID] | None = None,
        on_webhook_queued: Callable[[], None] | None = None,
        rate_limiter: RateLimiter | None = None,
        subjects: SubjectCheck | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        # ``read()``'s lone SELECT runs in autocommit sessions when given: no BEGIN/ROLLBACK round trips.
        self.read_sessions = read_sessions or sessions
        # Every statement on flows; the hot path's (a status read, a create's insert, a retry's
        # event) run on the statement pool, ``direct``.
        self.statements = FlowStatements(direct)
        self.hub = hub
        self.codec = codec
        self.wire = FlowWire(settings, codec)
        self.handlers = handlers
        # Told of every committed transition, in process (metrics).
        self.listeners = tuple(listeners)
        # Told after a commit that queued a completion webhook (the webhook worker's wake-up).
        self.on_webhook_queued = on_webhook_queued
        # The other id a transition wakes (its server client's event-stream tails), published in
        # the same message as the flow's.
        self.also_wakes = also_wakes
        # Flow creations per minute per server client, counted in the creating transaction.
        self.rate_limiter = rate_limiter
        # Checks a status read's subject token (``whole_status``); without it such reads are refused.
        self.subjects = subjects
        self.clock: Clock = clock or SystemClock()

    # ---- units of work ---------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[UnitOfWork]:
        async with unit_of_work(self.sessions) as session:
            uow = UnitOfWork(session, self.statements)
            yield uow
        await self.announce(uow.moved)

    async def announce(self, moved: Sequence[Moved[Any]], *, batch: str | None = None) -> None:
        """After commit: wake waiters everywhere, tell in-process listeners (metrics, logs), and
        wake this replica's webhook worker when the transitions queued a delivery.

        Each flow gets its ``flow transition`` line, except in a ``batch`` (a sweep's expiries):
        then one line named ``batch`` carries the count and the flows' own lines are DEBUG. A
        burst of 100,000 expiries is otherwise 100,000 lines, and ~50 µs of the event loop each.

        The webhook worker is woken only when a delivery was queued: its round is a transaction
        (a pool checkout, BEGIN, the claim, COMMIT) in the same millisecond as the completing
        request's answer and the waiters it wakes, and most server clients have no webhook.
        """
        if not moved:
            return
        flows = [m.flow for m in moved]
        per_flow = batch is None or logger.isEnabledFor(logging.DEBUG)
        level = logging.INFO if batch is None else logging.DEBUG
        for flow in flows:
            if per_flow:
                extra: dict[str, Any] = {
                    "flow_id": FLOW_ID.format(flow.id),
                    "kind": flow.kind,
                    "outcome": flow.status,
                    "server_client": CLIENT_ID.format(flow.server_client_id),
                }
                if flow.completed_at is not None:  # created → terminal, by the database clock
                    extra["duration_ms"] = round((flow.completed_at - flow.created_at).total_seconds() * 1000, 1)
                logger.log(level, "flow transition", extra=extra)
            for listener in self.listeners:
                listener(flow)
        if batch is not None:
            logger.info(batch, extra={"count": len(flows)})
        ids = [f.id for f in flows]
        if self.also_wakes is not None:
            ids.extend(dict.fromkeys(self.also_wakes(f) for f in flows))
        await self.hub.publish(ids)
        if self.on_webhook_queued is not None and any(m.webhook_queued for m in moved):
            self.on_webhook_queued()

    async def finish(self, flow_id: uuid.UUID, change: Transition, **kwargs: Any) -> Flow | None:
        """One terminal transition in its own unit of work (None when the flow was not pending)."""
        async with self.unit_of_work() as uow:
            return await uow.transition(flow_id, change, **kwargs)

    # ---- reads -----------------------------------------------------------------------------------
    async def asker(self, server_client_id: uuid.UUID) -> tuple[str, str]:
        """``(display name, name)`` of the server client that asked: every page says who asks."""
        async with self.read_sessions() as session:
            query = select(ServerClient.display_name, ServerClient.name).where(ServerClient.id == server_client_id)
            row = (await session.execute(query)).first()
        return (row[0], row[1]) if row is not None else ("An unknown service", "unknown")

    async def read(self, flow_id: uuid.UUID) -> Flow | None:
        """Read a flow, expiring it first if the database clock says its time is up."""
        async with self.read_sessions() as session:
            found = await self.statements.get(session, flow_id)
            if found is None:
                return None
            flow, due = found
            if not due:
                return flow
        async with self.unit_of_work() as uow:
            expired = await uow.transition(
                flow_id,
                Transition(FlowStatus.EXPIRED, Actor.API, error_code="expired"),
                require_live=False,
                require_due=True,
            )
            if expired is not None:
                return expired
            again = await self.statements.get(uow.session, flow_id)
            return None if again is None else again[0]

    async def snapshot(self, flow_id: uuid.UUID) -> FlowFields | None:
        """``read`` for the hot path: one autocommit statement on the driver, no ORM instance.

        A flow pending past its expiry (by the database clock) is expired through ``read``, as
        every reader must; that is the rare case, and it returns the row after the transition.
        """
        found = await self.statements.snapshot(flow_id)
        if found is None:
            return None
        flow, due = found
        return await self.read(flow_id) if due else flow

    async def owned(self, client: AuthenticatedClient, flow_ref: str) -> FlowFields:
        flow_id = FLOW_ID.parse(flow_ref)
        flow = None if flow_id is None else await self.snapshot(flow_id)
        # Another client's flow is "not found": its existence is not theirs to learn.
        if flow is None or flow.server_client_id != client.id:
            raise FlowNotFound("No flow with this id belongs to this server client.")
        return flow

    # ---- create ----------------------------------------------------------------------------------
    def _ttl(self, request: CreateFlowRequest) -> int:
        ttl = request.ttl_seconds or self.settings.default_ttl_seconds
        if ttl > self.settings.max_ttl_seconds:
            raise InvalidRequest(f"ttl_seconds must be at most {self.settings.max_ttl_seconds}.")
        return ttl

    async def _check_rate(self, session: AsyncSession, client: AuthenticatedClient) -> None:
        """Flow creations per minute, per server client, shared by every replica: the limiter
        (``service.admin.quotas``, given by ``build_services``) counts in the creating transaction."""
        if self.rate_limiter is not None and client.flows_per_minute:
            await self.rate_limiter(session, client)

    async def create(self, client: AuthenticatedClient, request: CreateFlowRequest) -> tuple[bool, CreateFlowResponse]:
        """Create a flow or reuse the pending equivalent. Returns ``(created, response)``."""
        check_issuer_trusted(client, request.subject.iss)
        ttl = self._ttl(request)
        handler = self.handlers[request.kind]
        # A session connects on its first statement: a kind that reads nothing here takes no connection.
        async with self.sessions() as session:
            normalized = await handler.normalize(session, client, request)
            satisfied = await handler.satisfied(session, client, request, normalized)
        if satisfied is not None:
            tag(server_client=CLIENT_ID.format(client.id), kind=normalized.kind, outcome="satisfied")
            return False, self.wire.satisfied(request, normalized, satisfied.result, self.clock.now())
        flow: FlowFields | None = None
        if not client.pending_per_subject and not client.flows_per_minute:
            # Nothing to count first: the insert alone, one autocommit statement. It succeeds only
            # when no pending twin exists (not even an overdue one: the unique index holds it), so
            # reuse and the expiry of a stale twin are left to the full path below.
            flow = await self._insert_alone(client, request.subject, normalized, ttl, request.context)
        created = flow is not None
        if flow is None:
            async with self.unit_of_work() as uow:
                flow, created = await self._create_or_reuse(
                    uow, client, request.subject, normalized, ttl, request.context
                )
        tag_flow(flow, "created" if created else "reused")
        return created, self.wire.created(flow)

    @staticmethod
    def _pending_values(
        client: AuthenticatedClient,
        subject: Subject,
        normalized: NormalizedFlow,
        ttl: int,
        context: dict[str, Any],
    ) -> dict[str, Any]:
        return {
            "id": uuid7(),
            "server_client_id": client.id,
            "subject_iss": subject.iss,
            "subject_sub": subject.sub,
            "kind": normalized.kind,
            "reuse_key": normalized.reuse_key,
            "provider": normalized.provider,
            "scopes": list(normalized.scopes),
            "params": normalized.params,
            "context": context,
            "message": normalized.message,
            "external_url": normalized.external_url,
            "connection_id": normalized.connection_id,
            "ttl_seconds": ttl,
        }

    async def _insert_alone(
        self,
        client: AuthenticatedClient,
        subject: Subject,
        normalized: NormalizedFlow,
        ttl: int,
        context: dict[str, Any],
    ) -> FlowFields | None:
        values = self._pending_values(client, subject, normalized, ttl, context)
        return await self.statements.insert_alone(values)

    async def _create_or_reuse(
        self,
        uow: UnitOfWork,
        client: AuthenticatedClient,
        subject: Subject,
        normalized: NormalizedFlow,
        ttl: int,
        context: dict[str, Any],
    ) -> tuple[FlowFields, bool]:
        keys: dict[str, Any] = {
            "server_client_id": client.id,
            "subject_iss": subject.iss,
            "subject_sub": subject.sub,
            "kind": normalized.kind,
            "reuse_key": normalized.reuse_key,
        }
        stale = await self.statements.expire_stale_reusable(uow.session, **keys)
        if stale is not None:
            uow.moved.append(stale)
        if client.pending_per_subject:
            # Count-then-insert is only a quota if no twin request counts at the same time: hold a
            # transaction-scoped lock on (client, subject) until this transaction commits.
            await self.statements.lock_subject(
                uow.session, server_client_id=client.id, subject_iss=subject.iss, subject_sub=subject.sub
            )
        rate_checked = False
        # Retries cover the one race: the pending twin finishing between insert and read.
        for _ in range(3):
            existing = await self.statements.find_reusable(uow.session, **keys)
            if existing is not None:
                return existing, False
            if client.pending_per_subject:
                pending = await self.statements.count_pending_for_subject(
                    uow.session, server_client_id=client.id, subject_iss=subject.iss, subject_sub=subject.sub
                )
                if pending >= client.pending_per_subject:
                    raise RateLimited("Too many pending flows for this subject.", retry_after=30)
            if not rate_checked:  # one creation counts once, however many attempts it takes
                await self._check_rate(uow.session, client)
                rate_checked = True
            values = self._pending_values(client, subject, normalized, ttl, context)
            inserted = await self.statements.insert_pending(uow.session, values)
            if inserted is not None:
                return inserted, True
        raise FlowNotPending("The flow changed while it was being created; try again.")

    # ---- sweeping --------------------------------------------------------------------------------
    async def sweep_once(self) -> int:
        """Expire one batch of overdue flows (one statement, its own transaction), then announce them."""
        moved = await self.statements.expire_due(self.settings.sweep_batch_size)
        await self.announce(moved, batch="flows expired")
        return len(moved)

    async def finished_among(self, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        async with self.sessions() as session:
            return await self.statements.finished_among(session, ids)
