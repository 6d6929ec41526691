"""The flow engine: create-or-reuse, resolve a retry, status, and terminal transitions.

The service owns each unit of work: it opens a session, runs single-statement changes through
the repository, commits, and only then publishes wake-ups (a waiter must never be woken for a
change it cannot yet read).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.db.base import CLIENT_ID, FLOW_ID, uuid7
from service.db.direct import DirectStatements
from service.db.unit import unit_of_work
from service.errors import FlowNotFound, FlowNotPending, InvalidRequest, InvalidRequestState, RateLimited
from service.flows import repository as repo
from service.flows.kinds import KindHandler, NormalizedFlow, check_issuer_trusted
from service.flows.models import Flow
from service.flows.repository import FlowFields, Transition
from service.flows.request_state import RequestStateCodec
from service.flows.schemas import (
    CreateFlowRequest,
    CreateFlowResponse,
    FlowError,
    FlowView,
    ResolveRequest,
    ResolveResponse,
    StatusResponse,
    Subject,
)
from service.flows.states import Action, Actor, FlowStatus, Outcome, is_terminal, outcome_for_action
from service.identity.keys import AuthenticatedClient
from service.identity.models import SUBJECT_PROOF_REQUIRED, ServerClient
from service.observability.context import tag
from service.settings import Settings
from service.signals.bus import Waiter, WaiterHub

Answer = TypeVar("Answer")

logger = logging.getLogger("elicitd.flows")

INPUT_KEY_PREFIX = "elicitd_"
LEGACY_URL_ELICITATION_REQUIRED = -32042

TransitionListener = Callable[[FlowFields], None]
# Raises RateLimited when the client may not create another flow now (one conditional statement).
RateLimiter = Callable[[AsyncSession, AuthenticatedClient], Awaitable[None]]


class SubjectCheck(Protocol):
    """``service.identity.subject_proof.SubjectProver``: refuses the call unless ``token`` proves
    that ``iss`` + ``sub`` is the user calling (a client whose policy is ``none`` is not asked)."""

    async def prove(self, client: AuthenticatedClient, *, iss: str, sub: str, token: str | None) -> None: ...


def input_key(flow_id: uuid.UUID) -> str:
    return INPUT_KEY_PREFIX + FLOW_ID.format(flow_id)


class UnitOfWork:
    """A session plus the flows it moved; ``FlowService.unit_of_work`` commits then publishes."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.moved: list[repo.Moved[Flow]] = []

    async def transition(self, flow_id: uuid.UUID, change: Transition, **kwargs: Any) -> Flow | None:
        moved = await repo.transition(self.session, flow_id, change, **kwargs)
        if moved is None:
            return None
        self.moved.append(moved)
        return moved.flow

    async def event(
        self, flow_id: uuid.UUID, event_type: str, actor: Actor, detail: dict[str, Any] | None = None
    ) -> None:
        await repo.add_event(self.session, flow_id, event_type, actor, detail)


class FlowService:
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
        # The hot path's single statements (a status read, a create's insert, a retry's event).
        self.direct = direct
        self.hub = hub
        self.codec = codec
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
        self._draining = False
        # Checks a status read's subject token (``whole_status``); without it such reads are refused.
        self.subjects = subjects
        self.clock: Clock = clock or SystemClock()

    # ---- units of work ---------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[UnitOfWork]:
        async with unit_of_work(self.sessions) as session:
            uow = UnitOfWork(session)
            yield uow
        await self.announce(uow.moved)

    async def announce(self, moved: Sequence[repo.Moved[Any]], *, batch: str | None = None) -> None:
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

    @staticmethod
    def _tag(flow: FlowFields, outcome: str) -> None:
        """Name the flow in this request's log line (``service.observability.context``)."""
        tag(
            flow_id=FLOW_ID.format(flow.id),
            server_client=CLIENT_ID.format(flow.server_client_id),
            kind=flow.kind,
            outcome=outcome,
        )

    # ---- views -----------------------------------------------------------------------------------
    def url_for(self, flow: FlowFields) -> str:
        if flow.external_url is not None:
            return flow.external_url
        return f"{self.settings.public_url}/f/{FLOW_ID.format(flow.id)}"

    def view(self, flow: FlowFields) -> FlowView:
        error = FlowError(code=flow.error_code, message=flow.error_message) if flow.error_code else None
        return FlowView(
            id=FLOW_ID.format(flow.id),
            kind=flow.kind,
            status=flow.status,
            url=self.url_for(flow),
            expires_at=flow.expires_at,
            created_at=flow.created_at,
            subject=Subject(iss=flow.subject_iss, sub=flow.subject_sub),
            provider=flow.provider,
            scopes=list(flow.scopes or []),
            completed_at=flow.completed_at,
            error=error,
        )

    def summary(self, flow: FlowFields) -> FlowView:
        """What a flow's id alone may tell a server client that must prove the subject: its state
        and outcome, not whose it is nor its page (``whole_status``)."""
        error = FlowError(code=flow.error_code, message=flow.error_message) if flow.error_code else None
        return FlowView(
            id=FLOW_ID.format(flow.id),
            kind=flow.kind,
            status=flow.status,
            expires_at=flow.expires_at,
            created_at=flow.created_at,
            provider=flow.provider,
            scopes=list(flow.scopes or []),
            completed_at=flow.completed_at,
            error=error,
        )

    def _state_expiry(self, flow: FlowFields) -> int:
        return int(flow.expires_at.timestamp()) + self.settings.request_state_grace_seconds

    def mcp_input_required(self, flow: FlowFields, *, ask: bool) -> dict[str, Any]:
        """A complete 2026-07-28 ``InputRequiredResult``. With ``ask`` False it is state-only: the
        client retries at once without showing anything (the user is still in the browser)."""
        state = self.codec.mint(
            flow_id=flow.id,
            server_client_id=flow.server_client_id,
            subject=Subject(iss=flow.subject_iss, sub=flow.subject_sub),
            expires_at=self._state_expiry(flow),
            asked=ask,
        )
        result: dict[str, Any] = {"resultType": "input_required", "requestState": state}
        if ask:
            result["inputRequests"] = {
                input_key(flow.id): {
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": flow.message, "url": self.url_for(flow)},
                }
            }
        return result

    def legacy(self, flow: FlowFields) -> dict[str, Any]:
        """The 2025-11-25 equivalent: the URL elicitation and the -32042 error that carries it."""
        elicitation = {
            "mode": "url",
            "elicitationId": FLOW_ID.format(flow.id),
            "message": flow.message,
            "url": self.url_for(flow),
        }
        return {
            "code": LEGACY_URL_ELICITATION_REQUIRED,
            "message": "URL elicitation required",
            "elicitation": elicitation,
            "data": {"elicitations": [elicitation]},
        }

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
            found = await repo.get(session, flow_id)
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
            again = await repo.get(uow.session, flow_id)
            return None if again is None else again[0]

    async def snapshot(self, flow_id: uuid.UUID) -> FlowFields | None:
        """``read`` for the hot path: one autocommit statement on the driver, no ORM instance.

        A flow pending past its expiry (by the database clock) is expired through ``read``, as
        every reader must; that is the rare case, and it returns the row after the transition.
        """
        row = await self.direct.fetchrow(repo.SNAPSHOT, flow_id)
        if row is None:
            return None
        flow, due = repo.snapshot(row)
        return await self.read(flow_id) if due else flow

    async def owned(self, client: AuthenticatedClient, flow_ref: str) -> FlowFields:
        flow_id = FLOW_ID.parse(flow_ref)
        flow = None if flow_id is None else await self.snapshot(flow_id)
        # Another client's flow is "not found": its existence is not theirs to learn.
        if flow is None or flow.server_client_id != client.id:
            raise FlowNotFound("No flow with this id belongs to this server client.")
        return flow

    def _deadline(self, seconds: float) -> float:
        return self.clock.monotonic() + min(seconds, self.settings.max_wait_seconds)

    async def wait(self, flow_id: uuid.UUID, seconds: float, *, owner: uuid.UUID | None = None) -> FlowFields | None:
        """Wait until the flow is terminal or ``seconds`` pass. Register, *then* read (DESIGN §6).

        With ``owner``, a flow of another server client is None, decided on the first read: a
        status long-poll then costs one read before it parks, not an ownership read and another.
        """
        with self.hub.register(flow_id) as waiter:
            return await self._park(waiter, flow_id, self._deadline(seconds), owner=owner)

    def drain(self) -> None:
        """The process is stopping: every parked long-poll is answered now, with its flow as it is
        (the client asks again, on another replica), and none parks from here on. Without this a
        stop waits for each long-poll's own deadline, up to ``ELICITD_MAX_WAIT_SECONDS``."""
        self._draining = True
        self.hub.wake_all()

    async def _park(
        self,
        waiter: Waiter,
        flow_id: uuid.UUID,
        deadline: float,
        *,
        owner: uuid.UUID | None = None,
        first: FlowFields | None = None,
    ) -> FlowFields | None:
        """Until the flow is terminal or the deadline passes; ``waiter`` is registered already.

        The flow is read here (or given as ``first``, read after registering) and dropped before
        every wait: a parked request holds no row, only its waiter (a process parks thousands).
        """
        flow = first if first is not None else await self.snapshot(flow_id)
        first = None  # this frame lives as long as the wait: it must not keep the row either
        if flow is not None and owner is not None and flow.server_client_id != owner:
            return None
        clock = self.clock
        while flow is not None and not is_terminal(FlowStatus(flow.status)) and not self._draining:
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                break
            until_expiry = flow.expires_at.timestamp() - clock.time() + 0.05
            flow = None
            await waiter.wait(max(0.0, min(waiter.tick(remaining), until_expiry)))
            flow = await self.snapshot(flow_id)
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
            return False, self._satisfied_response(request, normalized, satisfied.result)
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
        self._tag(flow, "created" if created else "reused")
        response = CreateFlowResponse(
            status=flow.status,
            flow=self.view(flow),
            mcp=self.mcp_input_required(flow, ask=True),
            legacy=self.legacy(flow),
        )
        return created, response

    def _satisfied_response(
        self, request: CreateFlowRequest, normalized: NormalizedFlow, result: dict[str, Any]
    ) -> CreateFlowResponse:
        stamp = self.clock.now()
        view = FlowView(
            id="",
            kind=normalized.kind,
            status="completed",
            url="",
            expires_at=stamp,
            created_at=stamp,
            subject=request.subject,
            provider=normalized.provider,
            scopes=list(normalized.scopes),
            completed_at=stamp,
        )
        return CreateFlowResponse(status="completed", flow=view, result=result)

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
        row = await self.direct.fetchrow(repo.INSERT_PENDING.sql, *repo.insert_params(values))
        return None if row is None else repo.FlowSnapshot(*row)

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
        stale = await repo.expire_stale_reusable(uow.session, **keys)
        if stale is not None:
            uow.moved.append(stale)
        if client.pending_per_subject:
            # Count-then-insert is only a quota if no twin request counts at the same time: hold a
            # transaction-scoped lock on (client, subject) until this transaction commits.
            await repo.lock_subject(
                uow.session, server_client_id=client.id, subject_iss=subject.iss, subject_sub=subject.sub
            )
        rate_checked = False
        # Retries cover the one race: the pending twin finishing between insert and read.
        for _ in range(3):
            existing = await repo.find_reusable(uow.session, **keys)
            if existing is not None:
                return existing, False
            if client.pending_per_subject:
                pending = await repo.count_pending_for_subject(
                    uow.session, server_client_id=client.id, subject_iss=subject.iss, subject_sub=subject.sub
                )
                if pending >= client.pending_per_subject:
                    raise RateLimited("Too many pending flows for this subject.", retry_after=30)
            if not rate_checked:  # one creation counts once, however many attempts it takes
                await self._check_rate(uow.session, client)
                rate_checked = True
            values = self._pending_values(client, subject, normalized, ttl, context)
            inserted = await repo.insert_pending(uow.session, values)
            if inserted is not None:
                return inserted, True
        raise FlowNotPending("The flow changed while it was being created; try again.")

    # ---- resolve ---------------------------------------------------------------------------------
    async def resolve(
        self, client: AuthenticatedClient, request: ResolveRequest
    ) -> ResolveResponse | Parked[ResolveResponse]:
        """The answer to an MCP client's retry; when it must wait for the flow (``accept`` on a
        pending flow, with time left), a ``Parked`` whose ``wait()`` waits and ``answer()`` answers."""
        state = self.codec.verify(request.request_state, server_client_id=client.id, subject=request.subject)
        deadline = self._deadline(request.wait_seconds)
        # Register before the one read (DESIGN §6): a change committed after it wakes this waiter,
        # so the read that decides the answer also starts the wait; no second read before parking.
        waiter = self.hub.register(state.flow_id).__enter__()  # left here, or by the Parked's close()
        answered: ResolveResponse | Parked[ResolveResponse] | None = None
        try:
            answered = await self._resolve_registered(client, request, state.asked, waiter, deadline)
            return answered
        finally:
            if not isinstance(answered, Parked):
                waiter.__exit__(None, None, None)

    async def _resolve_registered(
        self, client: AuthenticatedClient, request: ResolveRequest, asked: bool, waiter: Waiter, deadline: float
    ) -> ResolveResponse | Parked[ResolveResponse]:
        flow = await self.snapshot(waiter.flow_id)
        if flow is None or flow.server_client_id != client.id:
            raise InvalidRequestState("The request state refers to no flow of this server client.")
        key = input_key(flow.id)
        unknown = set(request.input_responses) - {key}
        if unknown:
            raise InvalidRequest("input_responses holds keys this flow did not ask for.")
        answer = request.input_responses.get(key)
        status = FlowStatus(flow.status)

        if is_terminal(status):
            return self._resolved(flow, outcome_for_action(Action.ACCEPT, status))
        if answer is None:
            if asked:
                # The client did not answer the URL request it was given: ask again.
                return self._resolved(flow, Outcome.INPUT_REQUIRED, ask=True)
            return self._waited_resolve(waiter, deadline, flow, Action.ACCEPT)

        action = Action(answer.action)
        if action is Action.DECLINE:
            return await self._decline(flow)
        if action is Action.CANCEL:
            await self._client_event(flow.id, "client_cancelled")
            return self._resolved(flow, Outcome.CANCELLED)
        if asked:
            await self._client_event(flow.id, "client_accepted")
        return self._waited_resolve(waiter, deadline, flow, action)

    def _waited_resolve(
        self, waiter: Waiter, deadline: float, flow: FlowFields, action: Action
    ) -> ResolveResponse | Parked[ResolveResponse]:
        """The answer now when no time is left to wait, else the parked wait for it."""
        if deadline <= self.clock.monotonic():
            return self._resolved(flow, outcome_for_action(action, FlowStatus(flow.status)))
        return Parked(self, waiter, deadline, flow, functools.partial(self._resolve_after_wait, action))

    def _resolve_after_wait(self, action: Action, flow: FlowFields | None) -> ResolveResponse:
        if flow is None:  # gone while it was waited for: answered as if gone before
            raise InvalidRequestState("The request state refers to no flow of this server client.")
        return self._resolved(flow, outcome_for_action(action, FlowStatus(flow.status)))

    async def _client_event(self, flow_id: uuid.UUID, event_type: str) -> None:
        """The client's answer in the audit trail: one autocommit insert, no flow change."""
        await self.direct.execute(repo.ADD_EVENT, flow_id, event_type, Actor.MCP_CLIENT.value, "{}")

    async def _decline(self, flow: FlowFields) -> ResolveResponse:
        async with self.unit_of_work() as uow:
            moved = await uow.transition(
                flow.id, Transition(FlowStatus.DECLINED, Actor.MCP_CLIENT, error_code="declined")
            )
            current: FlowFields = flow
            if moved is not None:
                current = moved
            else:
                found = await repo.get(uow.session, flow.id)
                if found is not None:
                    current = found[0]
        return self._resolved(current, outcome_for_action(Action.DECLINE, FlowStatus(current.status)))

    def _resolved(self, flow: FlowFields, outcome: Outcome, *, ask: bool = False) -> ResolveResponse:
        self._tag(flow, outcome.value)
        mcp = self.mcp_input_required(flow, ask=ask) if outcome is Outcome.INPUT_REQUIRED else None
        result = flow.result if outcome is Outcome.COMPLETED else None
        return ResolveResponse(outcome=outcome.value, flow=self.view(flow), result=result, mcp=mcp)

    # ---- status ----------------------------------------------------------------------------------
    async def status(
        self, client: AuthenticatedClient, flow_ref: str, wait_seconds: float, subject_token: str | None = None
    ) -> StatusResponse | Parked[StatusResponse]:
        """The flow's status; for a long-poll on a flow still pending, a ``Parked`` whose
        ``wait()`` waits. Registered, then read once here: that read is the ownership check and
        answers a finished flow (or a spent deadline) at once. ``subject_token`` decides how much
        a client that must prove the subject is told (``whole_status``), before any wait."""
        if wait_seconds <= 0:
            owned = await self.owned(client, flow_ref)
            whole = client.subject_proof != SUBJECT_PROOF_REQUIRED or await self.whole_status(
                client, owned, subject_token
            )
            return self.status_of(owned, whole=whole)
        flow_id = FLOW_ID.parse(flow_ref)
        if flow_id is None:
            raise FlowNotFound("No flow with this id belongs to this server client.")
        deadline = self._deadline(wait_seconds)
        waiter = self.hub.register(flow_id).__enter__()  # left here, or by the Parked's close()
        parked: Parked[StatusResponse] | None = None
        try:
            flow = await self.snapshot(flow_id)
            if flow is None or flow.server_client_id != client.id:
                raise FlowNotFound("No flow with this id belongs to this server client.")
            whole = client.subject_proof != SUBJECT_PROOF_REQUIRED or await self.whole_status(
                client, flow, subject_token
            )
            if is_terminal(FlowStatus(flow.status)) or deadline <= self.clock.monotonic():
                return self.status_of(flow, whole=whole)
            parked = Parked(self, waiter, deadline, flow, functools.partial(self._status_after_wait, whole))
            return parked
        finally:
            if parked is None:
                waiter.__exit__(None, None, None)

    async def whole_status(self, client: AuthenticatedClient, flow: FlowFields, token: str | None) -> bool:
        """Whether a status read of a client that must prove the subject may show the flow's
        subject, page and result. Its API key alone reads only the summary: a leaked key must not
        list whose flows these are, nor read what they connected (account ids, field names). A
        token is verified as on every call naming a subject, against the flow's subject: another
        user's token, or a bad one, is refused (403), not answered in part."""
        if not token:
            return False
        if self.subjects is None:
            raise RuntimeError("FlowService was built without a subject check")
        await self.subjects.prove(client, iss=flow.subject_iss, sub=flow.subject_sub, token=token)
        return True

    def _status_after_wait(self, whole: bool, flow: FlowFields | None) -> StatusResponse:
        if flow is None:
            raise FlowNotFound("No flow with this id belongs to this server client.")
        return self.status_of(flow, whole=whole)

    def status_of(self, flow: FlowFields, *, whole: bool = True) -> StatusResponse:
        self._tag(flow, flow.status)
        if not whole:
            return StatusResponse(flow=self.summary(flow))
        return StatusResponse(flow=self.view(flow), result=flow.result if flow.status == "completed" else None)

    # ---- external kind -----------------------------------------------------------------------------
    async def finish_external(self, client: AuthenticatedClient, flow_ref: str, change: Transition) -> StatusResponse:
        """The one conditional statement first (this client's pending, live ``external`` flow);
        only when it moved nothing is the flow read, to say why."""
        flow_id = FLOW_ID.parse(flow_ref)
        row = None
        if flow_id is not None:
            row = await self.direct.fetchrow(
                repo.FINISH_EXTERNAL, *repo.finish_external_args(flow_id, client.id, change)
            )
        if row is None:
            flow = await self.owned(client, flow_ref)
            if flow.kind != "external":
                raise InvalidRequest(
                    "Only 'external' flows are completed through the API; elicitd runs this kind.",
                    extra={"code": "not_external"},
                )
            raise FlowNotPending(f"The flow is {flow.status}; it cannot change again.")
        moved = repo.moved_snapshot(row)
        await self.announce([moved])
        # No subject token on these calls: a client that must prove the subject reads the summary.
        return self.status_of(moved.flow, whole=client.subject_proof != SUBJECT_PROOF_REQUIRED)

    # ---- sweeping --------------------------------------------------------------------------------
    async def sweep_once(self) -> int:
        """Expire one batch of overdue flows (one statement, its own transaction), then announce them."""
        rows = await self.direct.fetch(repo.EXPIRE_DUE, *repo.expire_due_args(self.settings.sweep_batch_size))
        await self.announce([repo.moved_snapshot(row) for row in rows], batch="flows expired")
        return len(rows)

    async def finished_among(self, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        async with self.sessions() as session:
            return await repo.finished_among(session, ids)


class Parked(Generic[Answer]):
    """A long-poll (a status read or a resolve) that is registered, has read its pending flow
    once, and has not waited yet.

    The HTTP layer waits on it after the request's handler has returned (``service.flows.api``),
    so what a parked request holds is this object, the waiter and the frames of the wait: not the
    handler's frames, its arguments or the framework's per-request state around them. Used
    exactly once, in this order: await ``wait()``, then ``close()`` (in a ``finally``: it
    unregisters the waiter), then ``answer()`` with what the wait returned.
    """

    __slots__ = ("_deadline", "_finish", "_first", "_flows", "_waiter")

    def __init__(
        self,
        flows: FlowService,
        waiter: Waiter,
        deadline: float,
        first: FlowFields,
        finish: Callable[[FlowFields | None], Answer],
    ) -> None:
        self._flows = flows
        self._waiter = waiter
        self._deadline = deadline
        self._first: FlowFields | None = first
        self._finish = finish

    def _take_first(self) -> FlowFields | None:
        first, self._first = self._first, None
        return first

    def wait(self) -> Coroutine[Any, Any, FlowFields | None]:
        """The flow once it is terminal, or as it is when the deadline passes (None if it is
        gone). The wait is ``FlowService._park`` itself, handed back rather than awaited here: no
        frame of this method stays alive under a parked request (~0.3 KB each)."""
        waiter = self._waiter
        return self._flows._park(waiter, waiter.flow_id, self._deadline, first=self._take_first())

    def close(self) -> None:
        self._waiter.__exit__(None, None, None)

    def answer(self, flow: FlowFields | None) -> Answer:
        return self._finish(flow)
