"""SQL for connections and OAuth states. Repositories never commit; services own the transaction.

Each state change is one conditional statement: consuming a ``state`` is an ``UPDATE … WHERE
used_at IS NULL AND expires_at > now() AND browser_session_id = …``, so a replay, an expired
state and a state from another browser all fail the same way, atomically, on any replica.

A refresh is claimed, finished and given up the same way (``claim_refresh``, ``store_refreshed``,
``release_refresh_claim``): each is one statement that holds the row for milliseconds, and the
provider call between them happens with no transaction open.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Interval, func, literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, REVOKED, Connection, OAuthState
from service.db.base import uuid7
from service.grants.repository import granted_lateral


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


def _seconds(value: float) -> ColumnElement[timedelta]:
    return literal(timedelta(seconds=value), Interval())


def _due(margin_seconds: float) -> ColumnElement[bool]:
    """Expires within the margin (database clock). A token without an expiry is never due."""
    return func.coalesce(Connection.expires_at <= func.now() + _seconds(margin_seconds), False)


def _expired() -> ColumnElement[bool]:
    return func.coalesce(Connection.expires_at <= func.now(), False)


def _claimed() -> ColumnElement[bool]:
    return func.coalesce(Connection.refresh_claimed_until > func.now(), False)


async def pick_connections(
    session: AsyncSession, *, iss: str, sub: str, provider: str, account: str | None, margin_seconds: float
) -> list[tuple[Connection, bool]]:
    """``live_connections`` with, for each, whether its token is due for a refresh (one round trip)."""
    stmt = (
        select(Connection, _due(margin_seconds))
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
    return [(row[0], bool(row[1])) for row in await session.execute(stmt)]


@dataclass(frozen=True, slots=True)
class TokenRow:
    """What the token endpoint reads of a connection (``PICK_FOR_TOKEN``), without the ORM."""

    id: uuid.UUID
    status: str
    scopes: list[str]
    token_type: str
    provider: str
    account_id: str
    account_login: str | None
    expires_at: datetime | None
    access_token_enc: bytes | None
    access_token_key_id: str | None
    subject_iss: str
    subject_sub: str
    # What the asking server client was granted on it (``service.grants``): the union of its live
    # grants' scopes, and whether their ``last_used_at`` is due for a write.
    granted_scopes: list[str]
    touch_due: bool


# ``pick_connections`` as one positional statement for ``service.db.direct`` (the token endpoint,
# which every tool calls on every use): the columns of ``TokenRow``, then whether the token is due
# for a refresh by the database clock. $4 is the account id or NULL, $5 the refresh margin, $6 the
# asking server client: only connections it (or its trust group) holds a live grant on are read,
# so a connection it was not granted is exactly as absent as one that does not exist.
PICK_FOR_TOKEN = (
    "SELECT c.id, c.status, c.scopes, c.token_type, c.provider, c.account_id, c.account_login, c.expires_at, "
    "c.access_token_enc, c.access_token_key_id, c.subject_iss, c.subject_sub, gr.granted_scopes, gr.touch_due, "
    "COALESCE(c.expires_at <= now() + make_interval(secs => $5), false) AS due "
    f"FROM connections c {granted_lateral(connection='c.id', client='$6')} "
    f"WHERE c.subject_iss = $1 AND c.subject_sub = $2 AND c.provider = $3 AND c.status <> '{REVOKED}' "
    "AND ($4::text IS NULL OR c.account_id = $4) AND gr.granted ORDER BY c.updated_at DESC, c.id DESC"
)


def token_rows(rows: list[Any]) -> list[tuple[TokenRow, bool]]:
    # mypy cannot know that the slice holds the twelve leading columns: hence the ignore.
    return [(TokenRow(*row[:12], list(row[12] or ()), bool(row[13])), bool(row[14])) for row in rows]  # type: ignore[call-arg]


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
    """Write freshly issued tokens; the connection becomes active again.

    A refresh of the old grant that is still in flight loses its claim here, so its late write
    cannot replace the tokens of the new grant."""
    sql = (
        "UPDATE connections SET account_id = :account_id, account_login = :account_login, scopes = :scopes, "
        "token_type = :token_type, access_token_enc = :access_enc, access_token_key_id = :access_kid, "
        "refresh_token_enc = :refresh_enc, refresh_token_key_id = :refresh_kid, "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        "refresh_claim = NULL, refresh_claimed_until = NULL, "
        "status = 'active', updated_at = now(), revoked_at = NULL WHERE id = :id RETURNING *"
    )
    result = await _connections(session, sql, {**values, "id": connection_id})
    return result.scalars().one()  # type: ignore[no-any-return]


# ---- refresh: claim, call the provider holding nothing, write conditionally ---------------------------
@dataclass(frozen=True, slots=True)
class RefreshView:
    """A connection as a refresh sees it, every flag on the database clock."""

    connection: Connection
    due: bool  # expires within the refresh margin
    expired: bool  # already expired
    claimed: bool  # another attempt holds an unexpired claim


async def refresh_view(session: AsyncSession, connection_id: uuid.UUID, margin_seconds: float) -> RefreshView | None:
    stmt = (
        select(Connection, _due(margin_seconds), _expired(), _claimed())
        .where(Connection.id == connection_id)
        .execution_options(populate_existing=True)
    )
    row = (await session.execute(stmt)).first()
    if row is None:
        return None
    return RefreshView(connection=row[0], due=bool(row[1]), expired=bool(row[2]), claimed=bool(row[3]))


async def claim_refresh(
    session: AsyncSession,
    connection_id: uuid.UUID,
    *,
    claim: uuid.UUID,
    hold_seconds: float,
    margin_seconds: float,
    force: bool,
) -> tuple[Connection, bool] | None:
    """Claim the refresh of an active connection whose token is still due (any token when
    ``force``) and that no other attempt holds; returns the row as claimed and whether its token
    has expired, or None when another attempt holds it, it was refreshed, or it is not active.

    One statement on any replica: exactly one of many concurrent claimants gets the row. The claim
    lapses by itself at ``refresh_claimed_until``, so a claimant that dies blocks nobody for long.
    """
    conditions = [
        Connection.id == connection_id,
        Connection.status == ACTIVE,
        (Connection.refresh_claimed_until.is_(None)) | (Connection.refresh_claimed_until <= func.now()),
    ]
    if not force:
        conditions.append(_due(margin_seconds))
    stmt = (
        update(Connection)
        .where(*conditions)
        .values(
            refresh_claim=claim,
            refresh_claimed_until=func.now() + _seconds(hold_seconds),
        )
        .returning(Connection, _expired())
        .execution_options(populate_existing=True, synchronize_session=False)
    )
    row = (await session.execute(stmt)).first()
    return None if row is None else (row[0], bool(row[1]))


async def store_refreshed(
    session: AsyncSession, connection_id: uuid.UUID, claim: uuid.UUID, values: dict[str, Any]
) -> Connection | None:
    """Write a refresh's result and end its claim — only while the claim is still this attempt's
    and the connection is active (a reconnect or a revocation in the meantime wins)."""
    sql = (
        "UPDATE connections SET access_token_enc = :access_enc, access_token_key_id = :access_kid, "
        "refresh_token_enc = COALESCE(:refresh_enc, refresh_token_enc), "
        "refresh_token_key_id = COALESCE(:refresh_kid, refresh_token_key_id), "
        "token_type = :token_type, scopes = COALESCE(:scopes, scopes), "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        "refresh_claim = NULL, refresh_claimed_until = NULL, "
        f"refreshed_at = now(), updated_at = now() WHERE id = :id AND status = '{ACTIVE}' AND refresh_claim = :claim "
        "RETURNING *"
    )
    result = await _connections(session, sql, {**values, "id": connection_id, "claim": claim})
    return result.scalars().one_or_none()  # type: ignore[no-any-return]


async def release_refresh_claim(session: AsyncSession, connection_id: uuid.UUID, claim: uuid.UUID) -> None:
    """Give a claim up early (the call failed): the next caller may try at once."""
    await session.execute(
        text(
            "UPDATE connections SET refresh_claim = NULL, refresh_claimed_until = NULL "
            "WHERE id = :id AND refresh_claim = :claim"
        ),
        {"id": connection_id, "claim": claim},
    )


async def mark_reauthorization_required(
    session: AsyncSession, connection_id: uuid.UUID, *, claim: uuid.UUID | None = None
) -> bool:
    """The provider refused the grant (under this attempt's ``claim``), or the token expired and
    there is no refresh token (``claim`` None: only while that is still so). Wipes the tokens."""
    guard = (
        "AND refresh_claim = :claim"
        if claim is not None
        else "AND refresh_token_enc IS NULL AND COALESCE(expires_at <= now(), false)"
    )
    result = await session.execute(
        text(
            f"UPDATE connections SET status = '{REAUTHORIZATION_REQUIRED}', access_token_enc = NULL, "
            "access_token_key_id = NULL, refresh_token_enc = NULL, refresh_token_key_id = NULL, "
            "refresh_claim = NULL, refresh_claimed_until = NULL, updated_at = now() "
            f"WHERE id = :id AND status = '{ACTIVE}' {guard} RETURNING id"
        ),
        {"id": connection_id, "claim": claim} if claim is not None else {"id": connection_id},
    )
    return result.first() is not None


async def mark_revoked(session: AsyncSession, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Local revocation always happens, and wipes the ciphertexts rather than keeping dead secrets."""
    result = await session.execute(
        text(
            f"UPDATE connections SET status = '{REVOKED}', access_token_enc = NULL, access_token_key_id = NULL, "
            "refresh_token_enc = NULL, refresh_token_key_id = NULL, refresh_claim = NULL, "
            "refresh_claimed_until = NULL, revoked_at = now(), updated_at = now() "
            f"WHERE id = ANY(:ids) AND status <> '{REVOKED}' RETURNING id"
        ),
        {"ids": ids},
    )
    return [r[0] for r in result]
