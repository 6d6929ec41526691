"""Reconnect links for operators: ``POST /admin/v1/connections/{id}/reconnect-link`` and
``elicitd admin connections reconnect-link``.

The link is the address of the connection's reconnect flow (``service.connections.reconnect``),
the page a server would have shown the person itself: it opens a sign-in, and only the
connection's own subject may go on from there. It is therefore not a credential — forwarding it
to the wrong person gives them a sign-in they cannot pass — and it expires with its flow. Like
every admin call, minting one is audited (the route and the connection id, never the link).
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections.reconnect import start_reconnect
from service.db.base import CLIENT_ID, CONNECTION_ID
from service.errors import ConnectionNotFound
from service.flows.service import FlowService


class ReconnectLink(msgspec.Struct):
    connection_id: str
    # Send this to the person; it asks for their own sign-in, and works only for them.
    url: str
    flow_id: str
    expires_at: datetime
    # The server client the flow belongs to (one that holds a grant on the connection).
    server_client_id: str


async def reconnect_link(
    read_sessions: async_sessionmaker[AsyncSession], flows: FlowService, connection_ref: str
) -> ReconnectLink:
    """A reconnect link for the connection (the pending reconnect flow again while one is open);
    404 for no such connection, 409 ``not_reconnectable`` for a revoked or API-key one, or one no
    server may use."""
    started = await start_reconnect(read_sessions, flows, connection_ref)
    if started is None:
        raise ConnectionNotFound("No connection with this id.")
    return ReconnectLink(
        connection_id=CONNECTION_ID.format(started.connection_id),
        url=started.url,
        flow_id=started.flow_id,
        expires_at=started.expires_at,
        server_client_id=CLIENT_ID.format(started.server_client_id),
    )
