"""Starting a reconnect in place on a person's behalf: the *Reconnect* button on ``/me`` and the
operator's reconnect link.

A reconnect is an ``oauth_connect`` flow naming the connection (``reconnect: cn_…``), and every
flow belongs to a server client: the one started here belongs to a server client that holds a live
grant on the connection (directly or through its trust group) — the one that connected it when it
still does, else the earliest grantee — exactly the flow that client would get by asking
``POST /v1/flows`` itself. Completing it must answer for the same provider account and keeps the
connection id and every grant (``service.connect``).

Nothing here signs anybody in: the flow's page asks for the person's own sign-in, and only the
connection's subject may go on (the flow names that subject). A link an operator sends is
therefore worth exactly as much as the page a server would have shown; a stranger who opens it
meets a sign-in that is not theirs to pass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections.models import REVOKED, Connection
from service.db.base import CONNECTION_ID
from service.errors import Conflict
from service.flows.schemas import CreateFlowRequest, Subject
from service.flows.service import FlowService
from service.identity.keys import authenticated_client
from service.identity.models import ServerClient


class NotReconnectable(Conflict):
    code = "not_reconnectable"
    title = "This connection cannot be reconnected from here"


@dataclass(frozen=True, slots=True)
class ReconnectStarted:
    connection_id: uuid.UUID
    flow_id: str
    url: str
    # The server client the flow belongs to (it is the one told when the connection recovers).
    server_client_id: uuid.UUID
    expires_at: datetime


# The live grantees of a connection that may start a flow for it: enabled, allowed the provider.
_GRANTEES = """
SELECT sc.id FROM server_clients sc
WHERE NOT sc.disabled
  AND (cardinality(sc.allowed_providers) = 0 OR :provider = ANY(sc.allowed_providers))
  AND (cardinality(sc.trusted_issuers) = 0 OR :iss = ANY(sc.trusted_issuers))
  AND sc.id IN (
    SELECT COALESCE(g.server_client_id, tm.server_client_id) FROM grants g
    LEFT JOIN trust_group_members tm ON g.server_client_id IS NULL AND tm.group_id = g.trust_group_id
    WHERE g.connection_id = :cid AND g.revoked_at IS NULL)
ORDER BY sc.id = :connected_by DESC, sc.created_at, sc.id
LIMIT 1
"""


async def reconnect_grantee(session: AsyncSession, conn: Connection) -> ServerClient | None:
    """The server client a reconnect of ``conn`` is started for, or None when nobody may."""
    found = await session.execute(
        text(_GRANTEES),
        {
            "cid": conn.id,
            "provider": conn.provider,
            "iss": conn.subject_iss,
            "connected_by": conn.connected_by or uuid.UUID(int=0),
        },
    )
    client_id = found.scalar_one_or_none()
    return None if client_id is None else await session.get(ServerClient, client_id)


@dataclass(frozen=True, slots=True)
class HealthView:
    """What ``/me`` shows of a connection's health, and whether its *Reconnect* button can work."""

    health: str
    reason: str | None
    reconnectable: bool


# One statement for a whole page: each connection's health, and whether a reconnect can be started
# for it (OAuth, not revoked, and a grantee that may start the flow: ``_GRANTEES`` without the order).
_HEALTH_OF = f"""
SELECT c.id, c.health, c.health_reason,
       c.status <> '{REVOKED}' AND c.token_type <> 'api_key' AND EXISTS (
         SELECT 1 FROM server_clients sc
         WHERE NOT sc.disabled
           AND (cardinality(sc.allowed_providers) = 0 OR c.provider = ANY(sc.allowed_providers))
           AND (cardinality(sc.trusted_issuers) = 0 OR c.subject_iss = ANY(sc.trusted_issuers))
           AND sc.id IN (
             SELECT COALESCE(g.server_client_id, tm.server_client_id) FROM grants g
             LEFT JOIN trust_group_members tm ON g.server_client_id IS NULL AND tm.group_id = g.trust_group_id
             WHERE g.connection_id = c.id AND g.revoked_at IS NULL)) AS reconnectable
FROM connections c WHERE c.id = ANY(:ids)
"""


async def health_of(session: AsyncSession, connection_ids: list[uuid.UUID]) -> dict[uuid.UUID, HealthView]:
    if not connection_ids:
        return {}
    rows = await session.execute(text(_HEALTH_OF), {"ids": connection_ids})
    return {row.id: HealthView(row.health, row.health_reason, bool(row.reconnectable)) for row in rows}


def reconnectable(conn: Connection) -> bool:
    """An OAuth connection that is not revoked (its health may be anything: a reconnect of a
    healthy connection is merely a fresh provider step)."""
    return conn.status != REVOKED and conn.token_type != "api_key"


async def start_reconnect(
    read_sessions: async_sessionmaker[AsyncSession],
    flows: FlowService,
    connection_ref: str,
    *,
    subject: tuple[str, str] | None = None,
) -> ReconnectStarted | None:
    """Start (or reuse, while one is pending) the reconnect flow of a connection. ``subject``
    (issuer, ``sub``): only that person's connection — any other id is answered as absent. None
    when there is no such connection; ``NotReconnectable`` when it is revoked, holds an API key,
    or no server client holds a grant to start the flow for."""
    connection_id = CONNECTION_ID.parse(connection_ref)
    if connection_id is None:
        return None
    async with read_sessions() as session:
        conn = await session.get(Connection, connection_id, populate_existing=True)
        if conn is None or (subject is not None and (conn.subject_iss, conn.subject_sub) != subject):
            return None
        if not reconnectable(conn):
            raise NotReconnectable("A revoked or API-key connection is connected anew, not reconnected.")
        grantee = await reconnect_grantee(session, conn)
        if grantee is None:
            raise NotReconnectable("No server may use this connection, so none can ask for it again.")
        client = authenticated_client(grantee)
        provider, iss, sub = conn.provider, conn.subject_iss, conn.subject_sub
    request = CreateFlowRequest(
        subject=Subject(iss=iss, sub=sub),
        kind="oauth_connect",
        provider=provider,
        reconnect=CONNECTION_ID.format(connection_id),
    )
    _, answer = await flows.create(client, request)
    flow = answer.flow
    # A reconnect is never satisfied (it names a connection), and a flow made here shows its URL.
    assert flow.url is not None
    return ReconnectStarted(
        connection_id=connection_id,
        flow_id=flow.id,
        url=flow.url,
        server_client_id=client.id,
        expires_at=flow.expires_at,
    )
