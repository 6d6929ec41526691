"""SQL for connections and OAuth states. Repositories never commit; services own the transaction.

Each state change is one conditional statement: consuming a ``state`` is an ``UPDATE … WHERE
used_at IS NULL AND expires_at > now() AND browser_session_id = …``, so a replay, an expired
state and a state from another browser all fail the same way, atomically, on any replica.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, REVOKED, Connection, OAuthState
from service.db.base import uuid7


def state_digest(state: str) -> bytes:
    return hashlib.sha256(state.encode()).digest()


# ---- OAuth states ------------------------------------------------------------------------------------
async def insert_state(session: AsyncSession, values: dict[str, Any], ttl_seconds: int) -> None:
    """The state lives ``ttl_seconds`` but never past its flow's expiry."""
    await session.execute(
        text(
            "INSERT INTO oauth_states (id, state_hash, flow_id, browser_session_id, provider, verifier_enc, "
            "verifier_key_id, redirect_uri, scopes, expires_at) "
            "SELECT :id, :state_hash, f.id, :browser_session_id, :provider, :verifier_enc, :verifier_key_id, "
            ":redirect_uri, :scopes, LEAST(now() + make_interval(secs => :ttl), f.expires_at) "
            "FROM flows f WHERE f.id = :flow_id"
        ),
        {**values, "ttl": ttl_seconds},
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


async def claim_slot(session: AsyncSession, *, iss: str, sub: str, provider: str, account_id: str) -> uuid.UUID:
    """The id of the live connection for this account, creating an empty one if there is none.

    One statement, and it row-locks the connection: the id must be known before the tokens are
    encrypted (it is their associated data), and concurrent completions for one account converge.
    """
    result = await session.execute(
        text(
            "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, status) "
            "VALUES (:id, :iss, :sub, :provider, :account, 'active') "
            "ON CONFLICT (subject_iss, subject_sub, provider, account_id) WHERE status <> 'revoked' "
            "DO UPDATE SET updated_at = now() RETURNING id"
        ),
        {"id": uuid7(), "iss": iss, "sub": sub, "provider": provider, "account": account_id},
    )
    return result.scalar_one()  # type: ignore[no-any-return]


async def reclaim(session: AsyncSession, connection_id: uuid.UUID, account_id: str) -> bool:
    """A reconnect keeps the connection's id when the same provider account comes back."""
    result = await session.execute(
        text(
            "UPDATE connections SET updated_at = now() WHERE id = :id AND status <> 'revoked' "
            "AND account_id IN (:account, '') RETURNING id"
        ),
        {"id": connection_id, "account": account_id},
    )
    return result.scalar_one_or_none() is not None


async def store_tokens(session: AsyncSession, connection_id: uuid.UUID, values: dict[str, Any]) -> Connection:
    """Write freshly issued tokens; the connection becomes active again."""
    sql = (
        "UPDATE connections SET account_id = :account_id, account_login = :account_login, scopes = :scopes, "
        "token_type = :token_type, access_token_enc = :access_enc, access_token_key_id = :access_kid, "
        "refresh_token_enc = :refresh_enc, refresh_token_key_id = :refresh_kid, "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        "status = 'active', updated_at = now(), revoked_at = NULL WHERE id = :id RETURNING *"
    )
    result = await _connections(session, sql, {**values, "id": connection_id})
    return result.scalars().one()  # type: ignore[no-any-return]


async def lock_for_refresh(
    session: AsyncSession, connection_id: uuid.UUID, margin_seconds: float
) -> tuple[Connection, bool] | None:
    """Row-lock the connection (``FOR UPDATE``) and say whether it still needs a refresh.

    Every replica serializes on this lock, so exactly one refresh call reaches the provider; the
    others wait, then read the new token and find it fresh. With rotating refresh tokens this is
    what keeps a used refresh token from ever being sent twice.
    """
    row = (
        await session.execute(
            select(Connection, Connection.expires_at <= text("now() + make_interval(secs => :m)"))
            .where(Connection.id == connection_id)
            .with_for_update()
            .execution_options(populate_existing=True),
            {"m": margin_seconds},
        )
    ).first()
    if row is None:
        return None
    return row[0], bool(row[1])


async def store_refreshed(session: AsyncSession, connection_id: uuid.UUID, values: dict[str, Any]) -> Connection:
    sql = (
        "UPDATE connections SET access_token_enc = :access_enc, access_token_key_id = :access_kid, "
        "refresh_token_enc = COALESCE(:refresh_enc, refresh_token_enc), "
        "refresh_token_key_id = COALESCE(:refresh_kid, refresh_token_key_id), "
        "token_type = :token_type, scopes = COALESCE(:scopes, scopes), "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        "refreshed_at = now(), updated_at = now() WHERE id = :id AND status = 'active' RETURNING *"
    )
    result = await _connections(session, sql, {**values, "id": connection_id})
    return result.scalars().one()  # type: ignore[no-any-return]


async def mark_reauthorization_required(session: AsyncSession, connection_id: uuid.UUID) -> None:
    await session.execute(
        text(
            f"UPDATE connections SET status = '{REAUTHORIZATION_REQUIRED}', access_token_enc = NULL, "
            "access_token_key_id = NULL, refresh_token_enc = NULL, refresh_token_key_id = NULL, updated_at = now() "
            f"WHERE id = :id AND status = '{ACTIVE}'"
        ),
        {"id": connection_id},
    )


async def mark_revoked(session: AsyncSession, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Local revocation always happens, and wipes the ciphertexts rather than keeping dead secrets."""
    result = await session.execute(
        text(
            f"UPDATE connections SET status = '{REVOKED}', access_token_enc = NULL, access_token_key_id = NULL, "
            "refresh_token_enc = NULL, refresh_token_key_id = NULL, revoked_at = now(), updated_at = now() "
            f"WHERE id = ANY(:ids) AND status <> '{REVOKED}' RETURNING id"
        ),
        {"ids": ids},
    )
    return [r[0] for r in result]
