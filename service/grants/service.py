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

from service.connections.catalog import CATALOG
from service.connections.providers import get_provider
from service.connections.schemas import connection_result
from service.connections.service import ConnectionService
from service.crypto.vault import Vault
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


async def grant_for_flow(
    session: AsyncSession,
    flow: Flow,
    *,
    vault: Vault,
    connection_id: uuid.UUID,
    authorization_id: uuid.UUID | None,
    scopes: Sequence[str],
) -> repo.Given | None:
    """Grant the flow's server client (or its trust group) the authorization the flow just made
    (an API-key connection: the connection itself), with exactly that authorization's scopes.
    Called inside the transaction that completes the flow; the grantee's earlier grant on the
    connection, if any, now points here (``Given.replaced`` says what it pointed at)."""
    grantee = await repo.grantee_of(session, flow.server_client_id)
    given = await repo.give(
        session,
        vault=vault,
        connection_id=connection_id,
        authorization_id=authorization_id,
        grantee=grantee,
        scopes=scopes,
        origin=ORIGIN_FLOW,
        flow_id=flow.id,
    )
    if given is not None:
        logger.info(
            "grant made",
            extra={
                "flow_id": FLOW_ID.format(flow.id),
                "connection_id": CONNECTION_ID.format(connection_id),
                "grant_id": GRANT_ID.format(given.grant_id),
            },
        )
    return given


# The grant page's choices (DESIGN §10). ``share``: an authorization holds exactly what was asked.
# ``separate``: a provider trip for a new authorization with just the asked scopes (the first
# choice whenever the only authorization holds more). ``share_wider``: the wider authorization,
# recorded on the grant with all of its scopes, only as an explicit second choice.
SHARE = "share"
SEPARATE = "separate"
SHARE_WIDER = "share_wider"


@dataclass(frozen=True, slots=True)
class GrantOffer:
    """A grant page: an existing connection and the authorization it could share.

    ``wider`` is set when that authorization holds more than the flow asks for: the page then says
    so in full (who holds what) and offers a separate authorization first."""

    connection: repo.OfferedConnection
    party: repo.AskingParty
    scopes: list[str]
    authorization: repo.HeldAuthorization | None = None
    wider: bool = False
    # Whether the provider can issue a second token set for one app and user (the catalog says).
    can_separate: bool = True


@dataclass(frozen=True, slots=True)
class Allowed:
    flow: Flow


@dataclass(frozen=True, slots=True)
class Gone:
    """The connection stopped covering the flow before *Allow* landed: show the flow's page again."""


class _Abandon(Exception):
    pass


def _choose(held: Sequence[repo.HeldAuthorization], asked: Sequence[str]) -> repo.HeldAuthorization | None:
    """The authorization a grant page offers: one holding exactly the asked scopes, else the
    narrowest that holds them all (``held`` comes narrowest first); None when none does."""
    wanted = frozenset(asked)
    exact = [a for a in held if a.scopes == wanted]
    if exact:
        return exact[0]
    covering = [a for a in held if wanted <= a.scopes]
    return covering[0] if covering else None


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


def grant_result(offered: repo.OfferedConnection, kind: str, scopes: Sequence[str]) -> dict[str, Any]:
    """The result a grant gives the MCP server: the shape a connect (or an API-key form) gives, with
    the scopes this client may use — never the token."""
    if kind == "api_key":
        return connection_result(offered, fields=offered.fields)
    return connection_result(offered, scopes=sorted(set(scopes)))


class GrantService:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        read_sessions: async_sessionmaker[AsyncSession],
        flows: FlowService,
        connections: ConnectionService,
        vault: Vault,
        on_events: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.vault = vault
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
        """The grant page's offer when the flow names a connection that can serve it without the
        provider (an API key; an authorization holding at least the asked scopes); None means the
        kind's own page (the provider step, the API-key form)."""
        if flow.kind not in GRANTABLE_KINDS or flow.connection_id is None or flow.provider is None:
            return None
        async with self.read_sessions() as session:
            offered = await repo.offered_connection(
                session, flow.connection_id, iss=flow.subject_iss, sub=flow.subject_sub, provider=flow.provider
            )
            if offered is None:
                return None
            held = await repo.active_authorizations(session, offered.id) if flow.kind == "oauth_connect" else []
            party = await repo.asking_party(session, flow.server_client_id)
            can_separate = await self._can_separate(session, flow.provider)
        asked = self._asked(flow)
        if flow.kind != "oauth_connect":
            return GrantOffer(connection=offered, party=party, scopes=asked)
        chosen = _choose(held, asked)
        if chosen is None:
            return None
        return GrantOffer(
            connection=offered,
            party=party,
            scopes=asked,
            authorization=chosen,
            wider=chosen.scopes != frozenset(asked),
            can_separate=can_separate,
        )

    @staticmethod
    async def _can_separate(session: AsyncSession, provider: str) -> bool:
        row = await get_provider(session, provider)
        entry = CATALOG.get(row.catalog or "") if row is not None else None
        return entry is None or entry.second_token_set

    async def allow(self, flow: Flow, choice: str = SHARE) -> Allowed | Gone | None:
        """*Allow* (``share``) or *Share the wider access* (``share_wider``): grant and complete the
        flow in one transaction. None when the flow is no longer pending (nothing granted); ``Gone``
        when the connection no longer offers what the page showed."""
        asked = self._asked(flow)
        offer = await self.offer(flow)
        if offer is None:
            return Gone()
        auth = offer.authorization
        if auth is not None and offer.wider and choice != SHARE_WIDER:
            return Gone()  # the page showed the choices; a plain Allow cannot take the wider access
        scopes = sorted(auth.scopes) if auth is not None else asked
        try:
            async with self.flows.unit_of_work() as uow:
                session = uow.session
                grantee = await repo.grantee_of(session, flow.server_client_id)
                given = await repo.give(
                    session,
                    vault=self.vault,
                    connection_id=offer.connection.id,
                    authorization_id=auth.id if auth is not None else None,
                    grantee=grantee,
                    scopes=scopes,
                    origin=ORIGIN_FLOW,
                    flow_id=flow.id,
                    covering=(flow.subject_iss, flow.subject_sub),
                )
                if given is None:
                    raise _Abandon  # disconnected (or the authorization changed) between the statements
                moved = await uow.transition(
                    flow.id,
                    Transition(
                        FlowStatus.COMPLETED,
                        Actor.BROWSER,
                        result=grant_result(offer.connection, flow.kind, scopes),
                        connection_id=offer.connection.id,
                        detail={"grant_id": GRANT_ID.format(given.grant_id), "choice": choice},
                    ),
                )
                if moved is None:
                    raise _Abandon  # no longer pending: the grant is not made either
        except _Abandon:
            return None
        if given.replaced is not None:
            await self.connections.retire([given.replaced])
        logger.info(
            "grant allowed",
            extra={
                "flow_id": FLOW_ID.format(flow.id),
                "connection_id": CONNECTION_ID.format(offer.connection.id),
                "grant_id": GRANT_ID.format(given.grant_id),
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
        await self.connections.revoke_by_id(connection_id, by="user")
        async with self.flows.unit_of_work() as uow:
            await repo.revoke_on_connections(uow.session, [connection_id], by="disconnect")
            told = await events_repo.grants_revoked_on(uow.session, [connection_id])
        await self._announce(told)
        return True

    async def _announce(self, server_client_ids: list[uuid.UUID]) -> None:
        if server_client_ids and self.on_events is not None:
            await self.on_events(server_client_ids)
