"""The flow service: the engine (``service.flows.engine``) plus the answers to an MCP server's
calls on a flow it holds, a retry's resolve, a status read, an ``external`` flow's completion.

A resolve or a status read that must wait registers, reads once and hands back a ``Parked``
(``service.flows.longpoll``) instead of waiting in its handler; its answers are built by
``service.flows.wire``.
"""

from __future__ import annotations

import functools
import uuid

from service.db.base import FLOW_ID
from service.errors import FlowNotFound, FlowNotPending, InvalidRequest, InvalidRequestState
from service.flows.engine import FlowEngine, UnitOfWork
from service.flows.longpoll import LongPolls, Parked
from service.flows.repository import FlowFields, Transition
from service.flows.schemas import ResolveRequest, ResolveResponse, StatusResponse
from service.flows.states import Action, Actor, FlowStatus, Outcome, is_terminal, outcome_for_action
from service.flows.wire import input_key
from service.identity.keys import AuthenticatedClient
from service.identity.models import SUBJECT_PROOF_REQUIRED
from service.signals.bus import Waiter

# What the rest of the code names from here.
__all__ = ["FlowService", "Parked", "UnitOfWork"]


class FlowService(FlowEngine):
    """``FlowEngine`` plus the calls an MCP server makes on a flow it holds."""

    @functools.cached_property
    def polls(self) -> LongPolls:
        """This service's long-polls (built on first use; read from the instance afterwards)."""
        return LongPolls(
            hub=self.hub, clock=self.clock, snapshot=self.snapshot, max_wait_seconds=self.settings.max_wait_seconds
        )

    def drain(self) -> None:
        """The process is stopping: parked long-polls are answered now (``LongPolls.drain``)."""
        self.polls.drain()

    # ---- resolve ---------------------------------------------------------------------------------
    async def resolve(
        self, client: AuthenticatedClient, request: ResolveRequest
    ) -> ResolveResponse | Parked[ResolveResponse]:
        """The answer to an MCP client's retry; when it must wait for the flow (``accept`` on a
        pending flow, with time left), a ``Parked`` whose ``wait()`` waits and ``answer()`` answers."""
        state = self.codec.verify(request.request_state, server_client_id=client.id, subject=request.subject)
        deadline = self.polls.deadline(request.wait_seconds)
        # Register before the one read (DESIGN §6): a change committed after it wakes this waiter,
        # so the read that decides the answer also starts the wait; no second read before parking.
        waiter = self.polls.register(state.flow_id)  # closed here, or by the Parked's close()
        answered: ResolveResponse | Parked[ResolveResponse] | None = None
        try:
            answered = await self._resolve_registered(client, request, state.asked, waiter, deadline)
            return answered
        finally:
            if not isinstance(answered, Parked):
                waiter.close()

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
            return self.wire.resolved(flow, outcome_for_action(Action.ACCEPT, status))
        if answer is None:
            if asked:
                # The client did not answer the URL request it was given: ask again.
                return self.wire.resolved(flow, Outcome.INPUT_REQUIRED, ask=True)
            return self._waited_resolve(waiter, deadline, flow, Action.ACCEPT)

        action = Action(answer.action)
        if action is Action.DECLINE:
            return await self._decline(flow)
        if action is Action.CANCEL:
            await self._client_event(flow.id, "client_cancelled")
            return self.wire.resolved(flow, Outcome.CANCELLED)
        if asked:
            await self._client_event(flow.id, "client_accepted")
        return self._waited_resolve(waiter, deadline, flow, action)

    def _waited_resolve(
        self, waiter: Waiter, deadline: float, flow: FlowFields, action: Action
    ) -> ResolveResponse | Parked[ResolveResponse]:
        """The answer now when no time is left to wait, else the parked wait for it."""
        if self.polls.expired(deadline):
            return self.wire.resolved(flow, outcome_for_action(action, FlowStatus(flow.status)))
        return self.polls.parked(waiter, deadline, flow, functools.partial(self._resolve_after_wait, action))

    def _resolve_after_wait(self, action: Action, flow: FlowFields | None) -> ResolveResponse:
        if flow is None:  # gone while it was waited for: answered as if gone before
            raise InvalidRequestState("The request state refers to no flow of this server client.")
        return self.wire.resolved(flow, outcome_for_action(action, FlowStatus(flow.status)))

    async def _client_event(self, flow_id: uuid.UUID, event_type: str) -> None:
        """The client's answer in the audit trail: one autocommit insert, no flow change."""
        await self.statements.note(flow_id, event_type, Actor.MCP_CLIENT)

    async def _decline(self, flow: FlowFields) -> ResolveResponse:
        async with self.unit_of_work() as uow:
            moved = await uow.transition(
                flow.id, Transition(FlowStatus.DECLINED, Actor.MCP_CLIENT, error_code="declined")
            )
            current: FlowFields = flow
            if moved is not None:
                current = moved
            else:
                found = await self.statements.get(uow.session, flow.id)
                if found is not None:
                    current = found[0]
        return self.wire.resolved(current, outcome_for_action(Action.DECLINE, FlowStatus(current.status)))

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
            return self.wire.status_of(owned, whole=whole)
        flow_id = FLOW_ID.parse(flow_ref)
        if flow_id is None:
            raise FlowNotFound("No flow with this id belongs to this server client.")
        deadline = self.polls.deadline(wait_seconds)
        waiter = self.polls.register(flow_id)  # closed here, or by the Parked's close()
        parked: Parked[StatusResponse] | None = None
        try:
            flow = await self.snapshot(flow_id)
            if flow is None or flow.server_client_id != client.id:
                raise FlowNotFound("No flow with this id belongs to this server client.")
            whole = client.subject_proof != SUBJECT_PROOF_REQUIRED or await self.whole_status(
                client, flow, subject_token
            )
            if is_terminal(FlowStatus(flow.status)) or self.polls.expired(deadline):
                return self.wire.status_of(flow, whole=whole)
            parked = self.polls.parked(waiter, deadline, flow, functools.partial(self._status_after_wait, whole))
            return parked
        finally:
            if parked is None:
                waiter.close()

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
        return self.wire.status_of(flow, whole=whole)

    # ---- external kind -----------------------------------------------------------------------------
    async def finish_external(self, client: AuthenticatedClient, flow_ref: str, change: Transition) -> StatusResponse:
        """The one conditional statement first (this client's pending, live ``external`` flow);
        only when it moved nothing is the flow read, to say why."""
        flow_id = FLOW_ID.parse(flow_ref)
        moved = None if flow_id is None else await self.statements.finish_external(flow_id, client.id, change)
        if moved is None:
            flow = await self.owned(client, flow_ref)
            if flow.kind != "external":
                raise InvalidRequest(
                    "Only 'external' flows are completed through the API; elicitd runs this kind.",
                    extra={"code": "not_external"},
                )
            raise FlowNotPending(f"The flow is {flow.status}; it cannot change again.")
        await self.announce([moved])
        # No subject token on these calls: a client that must prove the subject reads the summary.
        return self.wire.status_of(moved.flow, whole=client.subject_proof != SUBJECT_PROOF_REQUIRED)
