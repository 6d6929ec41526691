"""SQL of the event stream. Repositories never commit; the caller's unit of work does.

Every event is appended by the statement that makes the change it reports: ``stream_tail`` is a
CTE fragment that a transition statement ends with, and ``record`` appends events for changes
that are not transitions (a connection revoked, a grant revoked) as one statement of the caller's
transaction. Either way the numbers come from ``event_streams`` under a row lock held until the
commit (see ``service.events.models``): gap-free and in commit order per server client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.base import CONNECTION_ID, GRANT_ID


def stream_tail(source: str) -> str:
    """CTEs that number and append one event per row of ``source`` (a CTE with the columns
    ``server_client_id``, ``event_id``, ``type``, ``payload``). Counters are taken in server-client
    order, so two statements that touch the same clients cannot deadlock on them."""
    return f"""
, sq AS (
    INSERT INTO event_streams AS s (server_client_id, last_seq)
    SELECT server_client_id, count(*) FROM {source} GROUP BY server_client_id ORDER BY server_client_id
    ON CONFLICT (server_client_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq
    RETURNING s.server_client_id, s.last_seq
), st AS (
    INSERT INTO events (server_client_id, seq, id, type, payload)
    SELECT e.server_client_id,
           sq.last_seq + 1 - row_number() OVER (PARTITION BY e.server_client_id ORDER BY e.event_id DESC),
           e.event_id, e.type, e.payload
    FROM {source} e JOIN sq ON sq.server_client_id = e.server_client_id
)
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One stored event, as a stream sends it."""

    seq: int
    id: uuid.UUID
    type: str
    payload: dict[str, Any]
    created_at: datetime


_PAGE = text(
    "SELECT seq, id, type, payload, created_at FROM events "
    "WHERE server_client_id = :client AND seq > :after ORDER BY seq LIMIT :limit"
)
_POSITION = text(
    "SELECT (SELECT last_seq FROM event_streams WHERE server_client_id = :client) AS last, "
    "(SELECT min(seq) FROM events WHERE server_client_id = :client) AS first"
)
_LAST = text("SELECT last_seq FROM event_streams WHERE server_client_id = :client")


async def page(session: AsyncSession, server_client_id: uuid.UUID, after: int, limit: int) -> list[Row]:
    """Up to ``limit`` events after ``after``, in order (one range scan of the primary key)."""
    rows = await session.execute(_PAGE, {"client": server_client_id, "after": after, "limit": limit})
    return [Row(r.seq, r.id, r.type, r.payload, r.created_at) for r in rows]


async def position(session: AsyncSession, server_client_id: uuid.UUID) -> tuple[int, int | None]:
    """The last ``seq`` handed out (0 before the first event) and the oldest one still kept."""
    row = (await session.execute(_POSITION, {"client": server_client_id})).one()
    return int(row.last or 0), None if row.first is None else int(row.first)


async def last_seq(session: AsyncSession, server_client_id: uuid.UUID) -> int:
    return int((await session.execute(_LAST, {"client": server_client_id})).scalar() or 0)


_RECORD = (
    """
WITH src AS (
    SELECT CAST(x.server_client_id AS uuid) AS server_client_id, gen_random_uuid() AS event_id,
           x.type, x.payload
    FROM jsonb_to_recordset(CAST(:events AS jsonb)) AS x(server_client_id text, type text, payload jsonb)
)"""
    + stream_tail("src")
    + "SELECT DISTINCT server_client_id FROM src"
)


@dataclass(frozen=True, slots=True)
class NewEvent:
    server_client_id: uuid.UUID
    type: str
    payload: dict[str, Any]


async def record(session: AsyncSession, events: Sequence[NewEvent]) -> list[uuid.UUID]:
    """Append ``events`` in the caller's transaction; returns the server clients to wake after
    the commit. The payload is stored as given (it is what webhooks and streams send as ``data``)."""
    if not events:
        return []
    document = [{"server_client_id": str(e.server_client_id), "type": e.type, "payload": e.payload} for e in events]
    rows = await session.execute(text(_RECORD), {"events": json.dumps(document, default=str)})
    return [r[0] for r in rows]


# Who hears that a connection is gone: the server clients holding a live grant of it when it is
# revoked (directly, or as a member of the trust group it was granted to). A client whose grant was
# revoked earlier was told then (``grant.revoked``) and can no longer read the token; a client never
# granted it could not read it at all. Neither is told the connection existed. Callers revoke the
# connection before its grants (``disconnect``), so the grants ending with it still count as live.
_CONNECTION_AUDIENCE = text(
    """
SELECT DISTINCT COALESCE(g.server_client_id, m.server_client_id) AS server_client_id, c.id AS connection_id,
       c.provider, c.account_id, c.subject_iss, c.subject_sub, c.revoked_at
FROM connections c
JOIN grants g ON g.connection_id = c.id AND g.revoked_at IS NULL
LEFT JOIN trust_group_members m ON g.server_client_id IS NULL AND m.group_id = g.trust_group_id
WHERE c.id = ANY(:ids) AND COALESCE(g.server_client_id, m.server_client_id) IS NOT NULL
ORDER BY 1, 2
"""
)


async def connections_revoked(session: AsyncSession, connection_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """``connection.revoked`` for each connection just revoked in this transaction."""
    ids = list(connection_ids)
    if not ids:
        return []
    rows = (await session.execute(_CONNECTION_AUDIENCE, {"ids": ids})).all()
    events = [
        NewEvent(
            r.server_client_id,
            "connection.revoked",
            {
                "type": "connection.revoked",
                "connection_id": CONNECTION_ID.format(r.connection_id),
                "provider": r.provider,
                "account_id": r.account_id,
                "subject": {"iss": r.subject_iss, "sub": r.subject_sub},
                "occurred_at": r.revoked_at.isoformat() if r.revoked_at is not None else None,
            },
        )
        for r in rows
    ]
    return await record(session, events)


# A grant's grantee is one server client or every member of a trust group.
_GRANT_AUDIENCE = text(
    """
SELECT COALESCE(g.server_client_id, m.server_client_id) AS server_client_id, g.id AS grant_id,
       g.connection_id, g.scopes, g.revoked_at, g.revoked_by,
       c.provider, c.account_id, c.subject_iss, c.subject_sub
FROM grants g
JOIN connections c ON c.id = g.connection_id
LEFT JOIN trust_group_members m ON g.server_client_id IS NULL AND m.group_id = g.trust_group_id
WHERE g.id = ANY(:ids) AND g.revoked_at IS NOT NULL AND COALESCE(g.server_client_id, m.server_client_id) IS NOT NULL
ORDER BY 1, g.id
"""
)


async def grants_revoked(session: AsyncSession, grant_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """``grant.revoked`` to every server client a grant covered, for grants revoked in this
    transaction. Call it after the statement that set ``revoked_at``; wake the returned server
    clients after the commit (``EventHub.announce``)."""
    ids = list(grant_ids)
    if not ids:
        return []
    rows = (await session.execute(_GRANT_AUDIENCE, {"ids": ids})).all()
    events = [
        NewEvent(
            r.server_client_id,
            "grant.revoked",
            {
                "type": "grant.revoked",
                "grant_id": GRANT_ID.format(r.grant_id),
                "connection_id": CONNECTION_ID.format(r.connection_id),
                "provider": r.provider,
                "account_id": r.account_id,
                "scopes": list(r.scopes or []),
                "subject": {"iss": r.subject_iss, "sub": r.subject_sub},
                "revoked_by": r.revoked_by,
                "occurred_at": r.revoked_at.isoformat(),
            },
        )
        for r in rows
    ]
    return await record(session, events)


_PURGE = text(
    "DELETE FROM events e USING (SELECT server_client_id, seq FROM events "
    "WHERE created_at < now() - make_interval(secs => :keep) LIMIT :batch) old "
    "WHERE e.server_client_id = old.server_client_id AND e.seq = old.seq"
)


async def purge(session: AsyncSession, retention_seconds: float, batch: int = 10_000) -> int:
    """Drop up to ``batch`` events older than the retention window (by the database clock)."""
    result = await session.execute(_PURGE, {"keep": retention_seconds, "batch": batch})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


_SECRET = text("SELECT webhook_secret_key_id, webhook_secret_enc FROM server_clients WHERE id = :client")


async def signing_secret_blob(session: AsyncSession, server_client_id: uuid.UUID) -> tuple[str, bytes] | None:
    """The server client's webhook signing secret, still sealed (key id, ciphertext)."""
    row = (await session.execute(_SECRET, {"client": server_client_id})).first()
    if row is None or row[0] is None or row[1] is None:
        return None
    return str(row[0]), bytes(row[1])


_REVOKED_NOW = text("SELECT id FROM grants WHERE connection_id = ANY(:ids) AND revoked_at = now() ORDER BY id")


async def grants_revoked_on(session: AsyncSession, connection_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """``grant.revoked`` for the grants on these connections that this transaction revoked
    (``revoked_at = now()``: the transaction's own timestamp)."""
    ids = list(connection_ids)
    if not ids:
        return []
    grants = [row[0] for row in await session.execute(_REVOKED_NOW, {"ids": ids})]
    return await grants_revoked(session, grants)
