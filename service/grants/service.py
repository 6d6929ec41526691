"""Grants as a service: what the grant page offers and does, the user's own page, operators' grants.

Three ways a grant comes to be, all in the unit of work that records the answer:

* a **connect** (``oauth_connect`` callback) or an **API-key** form completes: the client whose
  flow it was is granted the scopes the page showed, as far as the connection holds them
  (``grant_for_flow``, called by those kinds inside their completing transaction);
* the **grant page** is answered *Allow*: one conditional statement grants while the connection is
  still active, the subject's and covering the scopes, and the flow completes in the same
  transaction — a disconnect in between wins, and the page falls back to the provider step;
* an **operator** grants through the admin API or CLI (audited).

Revoking is one conditional ``UPDATE``; nothing caches a grant, so the next token request on any
replica is refused.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections.service import ConnectionService
from service.db.base import CONNECTION_ID, FLOW_ID
from service.events import repository as events_repo
from service.flows.models import Flow
from service.flows.repository import Transition
from service.flows.service import FlowService
from service.flows.states import Actor, FlowStatus
from service.grants import repository as repo
from service.grants.models import GRANT_ID, ORIGIN_FLOW
from service.identity.issuers import list_issuers

logger = logging.getLogger("elicitd.grants")

GRANTABLE_KINDS = ("oauth_connect", "api_key")


def approved_scopes(asked: Sequence[str], held: Sequence[str]) -> list[str]:
    """What a completed connect grants its client: the scopes the page showed, as far as the
    connection holds them; everything the connection holds when the page named none."""
    return sorted(set(asked) & set(held)) if asked else sorted(set(held))


async def grant_for_flow(
    session: AsyncSession, flow: Flow, *, connection_id: uuid.UUID, connection_scopes: Sequence[str]
) -> uuid.UUID | None:
    """Grant the flow's server client (or its trust group) the connection the flow just made or
    reconnected. Called inside the transaction that completes the flow."""
    grantee = await repo.grantee_of(session, flow.server_client_id)
    granted = await repo.give(
        session,
        connection_id=connection_id,
        grantee=grantee,
        scopes=approved_scopes(list(flow.scopes or []), connection_scopes),
        origin=ORIGIN_FLOW,
        flow_id=flow.id,
    )
    if granted is not None:
        logger.info(
            "grant made",
            extra={
                "flow_id": FLOW_ID.format(flow.id),
                "connection_id": CONNECTION_ID.format(connection_id),
                "grant_id": GRANT_ID.format(granted),
            },
        )
    return granted


@dataclass(frozen=True, slots=True)
class GrantOffer:
    """A grant page: an existing connection that already covers what the flow asks for."""

    connection: repo.OfferedConnection
    party: repo.AskingParty
    scopes: list[str]


@dataclass(frozen=True, slots=True)
class Allowed:
    flow: Flow


@dataclass(frozen=True, slots=True)
class Gone:
    """The connection stopped covering the flow before *Allow* landed: show the flow's page again."""


class _Abandon(Exception):
    pass


@dataclass(frozen=True, slots=True)
class GrantEntry:
    id: str
    grantee: str
    members: tuple[str, ...]
    is_group: bool
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class ConnectionEntry:
    """One connection on ``/me``, with who may use it."""

    id: str
    provider: str
    account: str
    scopes: list[str]
    status: str
    is_api_key: bool
    created_at: datetime
    last_used_at: datetime | None
    grants: list[GrantEntry]
    scope_descriptions: dict[str, Any]


def connection_result(offered: repo.OfferedConnection, kind: str, scopes: Sequence[str]) -> dict[str, Any]:
    """The result a grant gives the MCP server: the shape a connect (or an API-key form) gives, with
    the scopes this client may use — never the token."""
    result: dict[str, Any] = {
        "connection_id": CONNECTION_ID.format(offered.id),
        "provider": offered.provider,
        "account_id": offered.account_id,
    }
    if kind == "api_key":
        result["fields"] = offered.fields
    else:
        result["account_login"] = offered.account_login
        result["scopes"] = sorted(set(scopes))
    return result


class GrantService:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        read_sessions: async_sessionmaker[AsyncSession],
        flows: FlowService,
        connections: ConnectionService,
        on_events: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.read_sessions = read_sessions
        self.flows = flows
        self.connections = connections
        # After a commit that appended stream events (grant.revoked): wake those clients' streams.
        self.on_events = on_events

    # ---- who asks --------------------------------------------------------------------------------
    async def asking_party(self, server_client_id: uuid.UUID) -> repo.AskingParty:
        async with self.read_sessions() as session:
            return await repo.asking_party(session, server_client_id)

    # ---- the grant page --------------------------------------------------------------------------
    @staticmethod
    def _asked(flow: Flow) -> list[str]:
        return list(flow.scopes or []) if flow.kind == "oauth_connect" else []

    async def offer(self, flow: Flow) -> GrantOffer | None:
        """The grant page's offer when the flow names a connection that already covers it; None means
        the kind's own page (the provider step, the API-key form)."""
        if flow.kind not in GRANTABLE_KINDS or flow.connection_id is None or flow.provider is None:
            return None
        async with self.read_sessions() as session:
            offered = await repo.offered_connection(
                session,
                flow.connection_id,
                iss=flow.subject_iss,
                sub=flow.subject_sub,
                provider=flow.provider,
                scopes=self._asked(flow),
            )
            if offered is None:
                return None
            party = await repo.asking_party(session, flow.server_client_id)
        return GrantOffer(connection=offered, party=party, scopes=self._asked(flow))

    async def allow(self, flow: Flow) -> Allowed | Gone | None:
        """*Allow*: grant and complete the flow in one transaction. None when the flow is no longer
        pending (nothing granted); ``Gone`` when the connection no longer covers it."""
        asked = self._asked(flow)
        try:
            async with self.flows.unit_of_work() as uow:
                session = uow.session
                offered = None
                if flow.connection_id is not None and flow.provider is not None:
                    offered = await repo.offered_connection(
                        session,
                        flow.connection_id,
                        iss=flow.subject_iss,
                        sub=flow.subject_sub,
                        provider=flow.provider,
                        scopes=asked,
                    )
                if offered is None:
                    return Gone()
                grantee = await repo.grantee_of(session, flow.server_client_id)
                grant_id = await repo.give(
                    session,
                    connection_id=offered.id,
                    grantee=grantee,
                    scopes=asked,
                    origin=ORIGIN_FLOW,
                    flow_id=flow.id,
                    covering=(flow.subject_iss, flow.subject_sub),
                )
                if grant_id is None:
                    raise _Abandon  # disconnected between the two statements
                moved = await uow.transition(
                    flow.id,
                    Transition(
                        FlowStatus.COMPLETED,
                        Actor.BROWSER,
                        result=connection_result(offered, flow.kind, asked),
                        connection_id=offered.id,
                        detail={"grant_id": GRANT_ID.format(grant_id)},
                    ),
                )
                if moved is None:
                    raise _Abandon  # no longer pending: the grant is not made either
        except _Abandon:
            return None
        logger.info(
            "grant allowed",
            extra={
                "flow_id": FLOW_ID.format(flow.id),
                "connection_id": CONNECTION_ID.format(offered.id),
                "grant_id": GRANT_ID.format(grant_id),
            },
        )
        return Allowed(flow=moved)

    async def decline(self, flow: Flow) -> Flow | None:
        return await self.flows.finish(flow.id, Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined"))

    # ---- the user's own page ---------------------------------------------------------------------
    async def sign_in_choices(self) -> list[tuple[str, str]]:
        """``(issuer, display name)`` of each enabled issuer, for a browser that opened ``/me`` bare."""
        async with self.read_sessions() as session:
            rows = await list_issuers(session)
        return [(row.issuer, row.display_name) for row in rows if row.enabled]

    async def overview(self, *, iss: str, sub: str) -> list[ConnectionEntry]:
        async with self.read_sessions() as session:
            connections = await repo.connections_of_subject(session, iss=iss, sub=sub)
            grants = await repo.live_grants_of_subject(session, iss=iss, sub=sub)
        by_connection: dict[uuid.UUID, list[repo.GrantRow]] = {}
        for grant in grants:
            by_connection.setdefault(grant.connection_id, []).append(grant)
        entries = []
        for conn in connections:
            mine = by_connection.get(conn.id, [])
            used = [g.last_used_at for g in mine if g.last_used_at is not None]
            entries.append(
                ConnectionEntry(
                    id=CONNECTION_ID.format(conn.id),
                    provider=conn.provider_display,
                    account=conn.account_login or conn.account_id,
                    scopes=list(conn.scopes),
                    status=conn.status,
                    is_api_key=conn.token_type == "api_key",
                    created_at=conn.created_at,
                    last_used_at=max(used) if used else None,
                    grants=[
                        GrantEntry(
                            id=GRANT_ID.format(g.id),
                            grantee=g.grantee,
                            members=g.members,
                            is_group=g.trust_group_id is not None,
                            scopes=g.scopes,
                            created_at=g.created_at,
                            last_used_at=g.last_used_at,
                        )
                        for g in mine
                    ],
                    scope_descriptions=conn.scope_descriptions,
                )
            )
        return entries

    async def revoke_for_subject(self, grant_ref: str, *, iss: str, sub: str) -> bool:
        """*Revoke access* on ``/me``: only a live grant on one of this subject's connections."""
        grant_id = GRANT_ID.parse(grant_ref)
        if grant_id is None:
            return False
        async with self.flows.unit_of_work() as uow:
            connection_id = await repo.revoke_for_subject(uow.session, grant_id, iss=iss, sub=sub, by="subject")
            told = await events_repo.grants_revoked(uow.session, [grant_id]) if connection_id is not None else []
        await self._announce(told)
        if connection_id is None:
            return False
        logger.info(
            "grant revoked",
            extra={"grant_id": grant_ref, "connection_id": CONNECTION_ID.format(connection_id), "actor": "subject"},
        )
        return True

    async def disconnect(self, connection_ref: str, *, iss: str, sub: str) -> bool:
        """*Disconnect* on ``/me``: revoke at the provider (when it can) and here, and end every grant."""
        connection_id = CONNECTION_ID.parse(connection_ref)
        if connection_id is None:
            return False
        async with self.read_sessions() as session:
            owned = await repo.connection_of_subject(session, connection_id, iss=iss, sub=sub)
        if owned is None:
            return False
        await self.connections.revoke_by_id(connection_id)
        async with self.flows.unit_of_work() as uow:
            await repo.revoke_on_connections(uow.session, [connection_id], by="disconnect")
            told = await events_repo.grants_revoked_on(uow.session, [connection_id])
        await self._announce(told)
        return True

    async def _announce(self, server_client_ids: list[uuid.UUID]) -> None:
        if server_client_ids and self.on_events is not None:
            await self.on_events(server_client_ids)
