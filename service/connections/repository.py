"""SQL for connections and OAuth states. Repositories never commit; services own the transaction.

A connection's tokens are its authorizations' (``service.connections.authorizations``).

Each state change is one conditional statement: consuming a ``state`` is an ``UPDATE … WHERE
used_at IS NULL AND expires_at > now() AND browser_session_id = …``, so a replay, an expired
state and a state from another browser all fail the same way, atomically, on any replica.

"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections import health
from service.connections.models import REVOKED, Connection, OAuthState
from service.db.base import uuid7


def state_digest(state: str) -> bytes:
    return hashlib.sha256(state.encode()).digest()


# ---- OAuth states ------------------------------------------------------------------------------------
async def insert_state(session: AsyncSession, values: dict[str, Any], ttl_seconds: int) -> None:
    """The state lives ``ttl_seconds`` but never past its flow's expiry."""
    await session.execute(
        text(
            "INSERT INTO oauth_states (id, state_hash, flow_id, browser_session_id, provider, verifier_enc, "
            "verifier_key_id, redirect_uri, scopes, parameters, expires_at) "
            "SELECT :id, :state_hash, f.id, :browser_session_id, :provider, :verifier_enc, :verifier_key_id, "
            ":redirect_uri, :scopes, CAST(:parameters AS jsonb), LEAST(now() + make_interval(secs => :ttl), "
            "f.expires_at) FROM flows f WHERE f.id = :flow_id"
        ),
        {"parameters": "{}", **values, "ttl": ttl_seconds},
    )


async def peek_state(session: AsyncSession, state: str) -> OAuthState | None:
    """Which flow a ``state`` names, without using it up (to know whose session to check)."""
    stmt = select(OAuthState).where(OAuthState.state_hash == state_digest(state))
    return (await session.execute(stmt)).scalar_one_or_none()


async def consume_state(session: AsyncSession, state: str, browser_session_id: bytes) -> OAuthState | None:
    """Use the state up, once, from the browser session that started it, before it expires."""
    stmt = (
        select(OAuthState)
        .from_statement(
            text(
                "UPDATE oauth_states SET used_at = now() WHERE state_hash = :h AND used_at IS NULL "
                "AND expires_at > now() AND browser_session_id = :sid RETURNING *"
            )
        )
        .execution_options(populate_existing=True)
    )
    result = await session.execute(stmt, {"h": state_digest(state), "sid": browser_session_id})
    return result.scalars().first()


async def purge_states(session: AsyncSession) -> int:
    result = await session.execute(text("DELETE FROM oauth_states WHERE expires_at < now() - interval '1 day'"))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# ---- connections -------------------------------------------------------------------------------------
def _connections(session: AsyncSession, sql: str, params: dict[str, Any]) -> Any:
    stmt = select(Connection).from_statement(text(sql)).execution_options(populate_existing=True)
    return session.execute(stmt, params)


async def live_connections(
    session: AsyncSession, *, iss: str, sub: str, provider: str, account: str | None = None
) -> list[Connection]:
    """Active or needing reauthorization, newest first (revoked ones are history)."""
    stmt = (
        select(Connection)
        .where(
            Connection.subject_iss == iss,
            Connection.subject_sub == sub,
            Connection.provider == provider,
            Connection.status != REVOKED,
        )
        .order_by(Connection.updated_at.desc(), Connection.id.desc())
        .execution_options(populate_existing=True)
    )
    if account is not None:
        stmt = stmt.where(Connection.account_id == account)
    return list((await session.execute(stmt)).scalars())


async def claim_slot(
    session: AsyncSession,
    *,
    iss: str,
    sub: str,
    provider: str,
    account_id: str,
    account_login: str | None = None,
    connected_by: uuid.UUID | None = None,
    parameters: Mapping[str, str] | None = None,
) -> uuid.UUID:
    """The id of the live connection for this account, creating an empty one if there is none
    (recording which server client's flow connected it), with the connection parameters its
    endpoints were filled from (the latest connect's: its authorization copies them).

    One statement, and it row-locks the connection: the id must be known before the tokens are
    encrypted (it is their associated data), and concurrent completions for one account converge.
    """
    result = await session.execute(
        text(
            "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, account_login, status, "
            "connected_by, parameters) VALUES (:id, :iss, :sub, :provider, :account, :login, 'active', :by, "
            "CAST(:parameters AS jsonb)) "
            "ON CONFLICT (subject_iss, subject_sub, provider, account_id) WHERE status <> 'revoked' "
            "DO UPDATE SET updated_at = now(), account_login = COALESCE(EXCLUDED.account_login, "
            "connections.account_login), parameters = EXCLUDED.parameters RETURNING id"
        ),
        {
            "id": uuid7(),
            "iss": iss,
            "sub": sub,
            "provider": provider,
            "account": account_id,
            "login": account_login,
            "by": connected_by,
            "parameters": json.dumps(dict(parameters or {}), sort_keys=True),
        },
    )
    return result.scalar_one()  # type: ignore[no-any-return]


async def reclaim(
    session: AsyncSession,
    connection_id: uuid.UUID,
    account_id: str,
    account_login: str | None = None,
    parameters: Mapping[str, str] | None = None,
) -> bool:
    """A flow that names a connection keeps its id only when the same provider account comes back."""
    result = await session.execute(
        text(
            "UPDATE connections SET updated_at = now(), account_login = COALESCE(:login, account_login), "
            "parameters = CAST(:parameters AS jsonb) "
            "WHERE id = :id AND status <> 'revoked' AND account_id = :account RETURNING id"
        ),
        {
            "id": connection_id,
            "account": account_id,
            "login": account_login,
            "parameters": json.dumps(dict(parameters or {}), sort_keys=True),
        },
    )
    return result.scalar_one_or_none() is not None


async def mark_revoked(session: AsyncSession, ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Local revocation always happens, and wipes the ciphertexts rather than keeping dead secrets
    (an API-key connection's own; an OAuth connection's authorizations go with it, by the caller).
    ``reason`` (``revoked_by_user``, ``revoked_by_server``, ``revoked_by_operator``) is its health's."""
    result = await session.execute(
        text(
            f"UPDATE connections SET status = '{REVOKED}', health = 'revoked', health_reason = :reason, "
            "health_http_status = NULL, checked_at = now(), access_token_enc = NULL, access_token_key_id = NULL, "
            "refresh_token_enc = NULL, refresh_token_key_id = NULL, refresh_claim = NULL, "
            "refresh_claimed_until = NULL, revoked_at = now(), updated_at = now() "
            f"WHERE id = ANY(:ids) AND status <> '{REVOKED}' RETURNING id"
        ),
        {"ids": ids, "reason": reason},
    )
    return [r[0] for r in result]


async def store_api_key(
    session: AsyncSession, connection_id: uuid.UUID, *, key_id: str, sealed: bytes, fields: Mapping[str, str]
) -> health.Moved:
    """An entered API key as the connection's own token (``sealing.TokenSeal.seal_api_key``), with
    its non-secret fields; whatever the connection held before (a key, OAuth tokens on the row) is
    replaced, and a revoked row is live again. The caller holds the row (``claim_slot``).

    The live check just accepted the key, so it is checked now and ``healthy``: a key that a probe
    found refused (``needs_reauthorization``) recovers, with ``connection.recovered`` to the
    connection's grantees in the same statement; a probe of the old key still in flight loses its
    claim, so its late verdict cannot land on the new key (``service.connections.key_probes``)."""
    update = (
        "UPDATE connections a SET access_token_enc = :blob, access_token_key_id = :kid, "
        "refresh_token_enc = NULL, refresh_token_key_id = NULL, token_type = 'api_key', "
        "scopes = '{}', expires_at = NULL, account_login = NULL, fields = CAST(:fields AS jsonb), "
        "status = 'active', health = 'healthy', health_reason = NULL, health_http_status = NULL, "
        "checked_at = now(), refresh_claim = NULL, refresh_claimed_until = NULL, updated_at = now(), "
        "revoked_at = NULL FROM (SELECT id, health AS before FROM connections WHERE id = :id FOR UPDATE) b "
        f"WHERE a.id = b.id RETURNING {health.MOVED_KEY}"
    )
    params = {"blob": sealed, "kid": key_id, "fields": json.dumps(dict(fields)), "id": connection_id}
    return await health.transition(session, update, params, key=True)
