"""Changes of an authorization's health, each one statement with the events it causes.

An authorization is ``healthy``, ``expiring`` (it works, but a person must act soon: its refresh
token nears its own end, or it has none and its access token nears its end),
``needs_reauthorization`` or ``revoked`` (migration 0014). Every change of health is one
``UPDATE`` (``transition``) that also appends, in the same statement, one event per server client
holding a live grant on that authorization (directly or through its trust group) to the event
stream and, where the client has a webhook, to the outbox: ``connection.expiring``,
``connection.needs_reauthorization``, and ``connection.recovered`` back to ``healthy``. The row's
health before the change is read under the row lock in the same statement, so the event exists
exactly when the change committed, once per change: a second statement finding the health
already there changes nothing and tells nobody. Revocation keeps its own event
(``connection.revoked``, ``service.events.repository``).

Repositories never commit; the caller's unit of work does, and wakes the returned server clients'
streams after it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections.models import (
    ACTIVE,
    EXPIRING,
    HEALTHY,
    NEEDS_REAUTHORIZATION,
    REAUTHORIZATION_REQUIRED,
)
from service.db.base import CONNECTION_ID
from service.events.repository import stream_tail
from service.signals.routing import outbox_endpoints, outbox_row_id

EXPIRING_EVENT = "connection.expiring"
NEEDS_REAUTHORIZATION_EVENT = "connection.needs_reauthorization"
RECOVERED_EVENT = "connection.recovered"
# A refresh that changed no health (off by default: ``ELICITD_REFRESH_EVENTS``).
REFRESHED_EVENT = "connection.refreshed"
EVENT_TYPES = (EXPIRING_EVENT, NEEDS_REAUTHORIZATION_EVENT, RECOVERED_EVENT)

# What ``transition``'s UPDATE returns: the row after the change, and ``before``, its health before.
MOVED = (
    "a.id, a.connection_id, a.provider, a.account_id, a.subject_iss, a.subject_sub, a.health, "
    "a.health_reason, a.health_http_status, a.expires_at, a.refresh_expires_at, b.before"
)


def _event_type(refreshed: bool) -> str:
    """The event a row's change causes; with ``refreshed`` (a refresh's write), an unchanged health
    is ``connection.refreshed`` instead of nothing."""
    same = f"'{REFRESHED_EVENT}'" if refreshed else "NULL"
    return (
        f"CASE WHEN m.before = m.health THEN {same} "
        f"WHEN m.health = '{EXPIRING}' THEN '{EXPIRING_EVENT}' "
        f"WHEN m.health = '{NEEDS_REAUTHORIZATION}' THEN '{NEEDS_REAUTHORIZATION_EVENT}' "
        f"WHEN m.health = '{HEALTHY}' AND m.before IN ('{EXPIRING}', '{NEEDS_REAUTHORIZATION}') "
        f"THEN '{RECOVERED_EVENT}' END"
    )


# What a health statement on an API-key connection's own row returns (it has no authorization:
# its id is the connection's, and its grants point at the connection alone).
MOVED_KEY = (
    "a.id, a.id AS connection_id, a.provider, a.account_id, a.subject_iss, a.subject_sub, a.health, "
    "a.health_reason, a.health_http_status, a.expires_at, a.refresh_expires_at, b.before"
)
_GRANTS_OF_AUTHORIZATION = "g.authorization_id = m.id"
_GRANTS_OF_KEY = "g.connection_id = m.id AND g.authorization_id IS NULL"


def _statement(update: str, *, refreshed: bool = False, grants_on: str = _GRANTS_OF_AUTHORIZATION) -> str:
    """``update`` changes ``authorizations a`` (or, with ``grants_on=_GRANTS_OF_KEY``, an API-key
    ``connections a``) joined to ``b`` (one row each, taken ``FOR UPDATE``, with ``b.before`` its
    health then) and returns ``MOVED`` (``MOVED_KEY``)."""
    return (
        f"""
WITH m AS ({update}),
au AS (
    SELECT DISTINCT COALESCE(g.server_client_id, tm.server_client_id) AS server_client_id, m.id,
           {_event_type(refreshed)} AS type
    FROM m
    JOIN grants g ON {grants_on} AND g.revoked_at IS NULL
    LEFT JOIN trust_group_members tm ON g.server_client_id IS NULL AND tm.group_id = g.trust_group_id
    WHERE COALESCE(g.server_client_id, tm.server_client_id) IS NOT NULL AND ({_event_type(refreshed)}) IS NOT NULL
), ev AS (
    SELECT au.server_client_id, gen_random_uuid() AS event_id, au.type,
           jsonb_build_object(
               'type', au.type,
               'connection_id', {CONNECTION_ID.sql("m.connection_id")},
               'provider', m.provider,
               'account_id', m.account_id,
               'subject', jsonb_build_object('iss', m.subject_iss, 'sub', m.subject_sub),
               'status', m.health,
               'reason', m.health_reason,
               'http_status', m.health_http_status,
               'expires_at', m.expires_at,
               'refresh_expires_at', m.refresh_expires_at,
               'occurred_at', now()) AS payload
    FROM au JOIN m ON m.id = au.id
), ob AS (
    INSERT INTO webhook_outbox (id, server_client_id, flow_id, event_type, payload, endpoint_id, event_id)
    SELECT {outbox_row_id("ev")}, ev.server_client_id, NULL, ev.type, ev.payload, e.id, ev.event_id
    FROM ev JOIN webhook_endpoints e ON {outbox_endpoints("ev")}
    RETURNING id
)"""
        + stream_tail("ev")
        + """
SELECT m.id, m.connection_id, m.health, m.before,
       ARRAY(SELECT DISTINCT server_client_id FROM ev) AS told, (SELECT count(*) FROM ob) AS queued
FROM m
"""
    )


@dataclass(frozen=True, slots=True)
class Moved:
    """What one health statement changed: the authorizations (with their connections), the server
    clients whose streams got an event, and whether a webhook delivery was queued."""

    authorizations: list[uuid.UUID]
    connections: list[uuid.UUID]
    told: list[uuid.UUID]
    queued: bool
    changed: dict[uuid.UUID, tuple[str, str]]  # authorization -> (before, after), only real changes

    @property
    def empty(self) -> bool:
        return not self.authorizations


async def transition(
    session: AsyncSession, update: str, params: dict[str, Any], *, refreshed: bool = False, key: bool = False
) -> Moved:
    """Run a health ``update`` with its events; ``key``: the update is of an API-key connection's
    own row (``MOVED_KEY``), whose grantees hold grants on the connection."""
    grants_on = _GRANTS_OF_KEY if key else _GRANTS_OF_AUTHORIZATION
    rows = (await session.execute(text(_statement(update, refreshed=refreshed, grants_on=grants_on)), params)).all()
    told = sorted({client for row in rows for client in (row.told or ())})
    return Moved(
        authorizations=[row.id for row in rows],
        connections=sorted({row.connection_id for row in rows}),
        told=told,
        queued=any(row.queued for row in rows),
        changed={row.id: (row.before, row.health) for row in rows if row.before != row.health},
    )


def _before(where: str, *, limit: bool = False) -> str:
    """The rows a change applies to, locked, with their health before it."""
    tail = " ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED" if limit else " FOR UPDATE"
    return f"(SELECT id, health AS before FROM authorizations WHERE {where}{tail}) b"


# The tokens an authorization that needs reauthorization no longer keeps.
_WIPE = (
    "access_token_enc = NULL, access_token_key_id = NULL, refresh_token_enc = NULL, refresh_token_key_id = NULL, "
    "refresh_claim = NULL, refresh_claimed_until = NULL"
)


def needs_reauthorization_update(where: str, *, limit: bool = False) -> str:
    """Active authorizations matching ``where`` stop being served: the provider refused the grant,
    the refresh token ended, or the token expired with no refresh token. ``:reason`` and
    ``:http_status`` say why."""
    rows = _before(f"status = '{ACTIVE}' AND {where}", limit=limit)
    return (
        f"UPDATE authorizations a SET status = '{REAUTHORIZATION_REQUIRED}', health = '{NEEDS_REAUTHORIZATION}', "
        f"health_reason = :reason, health_http_status = CAST(:http_status AS integer), checked_at = now(), {_WIPE}, "
        f"updated_at = now() FROM {rows} WHERE a.id = b.id RETURNING {MOVED}"
    )


def expiring_update(window: str) -> str:
    """Healthy active authorizations whose refresh token ends within ``window`` (an interval
    expression), or that have none and whose access token does: a person must act soon."""
    soon = f"now() + {window}"
    where = (
        f"status = '{ACTIVE}' AND health = '{HEALTHY}' AND (refresh_expires_at <= {soon} "
        f"OR (refresh_token_enc IS NULL AND expires_at <= {soon}))"
    )
    return (
        f"UPDATE authorizations a SET health = '{EXPIRING}', health_reason = CASE WHEN a.refresh_token_enc IS NULL "
        "THEN 'access_token_expiring' ELSE 'refresh_token_expiring' END, health_http_status = NULL, "
        f"checked_at = now() FROM {_before(where, limit=True)} WHERE a.id = b.id RETURNING {MOVED}"
    )


def health_after_tokens(refresh_expires_at: str, window: str) -> str:
    """The health of an authorization that just got working tokens: ``expiring`` when its refresh
    token ends within ``window``, else ``healthy``."""
    return f"CASE WHEN COALESCE({refresh_expires_at} <= now() + {window}, false) THEN '{EXPIRING}' ELSE '{HEALTHY}' END"


# The connection's health is its worst live authorization's (with that one's reason and times);
# a revoked connection is revoked. Run after any change of its authorizations (``sync_connection``).
SYNC_HEALTH = f"""
UPDATE connections c SET health = CASE WHEN c.status = 'revoked' THEN 'revoked' ELSE COALESCE(w.health, c.health) END,
       health_reason = CASE WHEN c.status = 'revoked' THEN c.health_reason
                            WHEN w.health IS NULL THEN c.health_reason ELSE w.health_reason END,
       health_http_status = CASE WHEN c.status = 'revoked' OR w.health IS NULL THEN c.health_http_status
                                 ELSE w.health_http_status END,
       checked_at = COALESCE(w.checked_at, c.checked_at),
       refresh_expires_at = CASE WHEN w.health IS NULL THEN c.refresh_expires_at ELSE w.refresh_expires_at END
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT a.health, a.health_reason, a.health_http_status, a.checked_at, a.refresh_expires_at
    FROM authorizations a WHERE a.connection_id = :id AND a.status <> 'revoked'
    ORDER BY CASE a.health WHEN '{NEEDS_REAUTHORIZATION}' THEN 0 WHEN '{EXPIRING}' THEN 1 ELSE 2 END,
             a.refresh_expires_at NULLS LAST, a.checked_at DESC NULLS LAST
    LIMIT 1
) w ON true
WHERE c.id = :id
"""
