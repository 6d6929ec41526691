# size: every statement on authorizations (token-set writes, refresh claims, the passes' batches) beside its guard
"""SQL for authorizations: the token sets of a connection. Repositories never commit.

A connection (a subject's account at a provider) holds one or more authorizations, each with exactly
the scopes the provider gave it; a grant points at one. Every statement that hands a token out
reads it *through the grant* (``service.connections.tokens``), so a server client is given only its grant's
authorization — never another one the same account holds for another server with more scopes.

A refresh is claimed, finished and given up on one authorization (``claim_refresh``,
``store_refreshed``, ``release_refresh_claim``): each is one statement that holds the row for
milliseconds, and the provider call between them happens with no transaction open.

``sync_connection`` keeps the connection's summary (its ``scopes`` — the union of its live
authorizations' — and its ``status``) in step, in the same transaction as the change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Interval, func, literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections import health
from service.connections.models import (
    ACTIVE,
    HEALTH_REVOKED,
    REAUTHORIZATION_REQUIRED,
    REVOKED,
    Authorization,
    Connection,
)
from service.connections.sealing import SealedTokens


def _authorizations(session: AsyncSession, sql: str, params: dict[str, Any]) -> Any:
    stmt = select(Authorization).from_statement(text(sql)).execution_options(populate_existing=True)
    return session.execute(stmt, params)


def _seconds(value: float) -> ColumnElement[timedelta]:
    return literal(timedelta(seconds=value), Interval())


def _due(margin_seconds: float) -> ColumnElement[bool]:
    """Expires within the margin (database clock). A token without an expiry is never due."""
    return func.coalesce(Authorization.expires_at <= func.now() + _seconds(margin_seconds), False)


def _expired() -> ColumnElement[bool]:
    return func.coalesce(Authorization.expires_at <= func.now(), False)


def _claimed() -> ColumnElement[bool]:
    return func.coalesce(Authorization.refresh_claimed_until > func.now(), False)


# ---- writing a new token set --------------------------------------------------------------------------
# When a new token set's refresh token ends: ``:refresh_expires_in`` seconds from now when the
# provider said (``refresh_token_expires_in``), else unknown.
_REFRESH_ENDS_NEW = (
    "CASE WHEN CAST(:refresh_expires_in AS integer) IS NULL THEN NULL "
    "ELSE now() + make_interval(secs => CAST(:refresh_expires_in AS integer)) END"
)
# After a refresh: a new end when the provider said one; unknown when it rotated the refresh token
# without saying; else the refresh token kept is the one it was, with its end.
_REFRESH_ENDS_AFTER = (
    "CASE WHEN CAST(:refresh_expires_in AS integer) IS NOT NULL "
    "THEN now() + make_interval(secs => CAST(:refresh_expires_in AS integer)) "
    "WHEN CAST(:rotated AS boolean) THEN NULL ELSE a.refresh_expires_at END"
)
_WINDOW = "make_interval(secs => CAST(:expiring_seconds AS double precision))"


async def _write_tokens(
    session: AsyncSession, update: str, params: dict[str, Any], authorization_id: uuid.UUID, *, refreshed: bool = False
) -> tuple[Authorization | None, health.Moved]:
    """A token set's write with its health events (``health.transition``); the row as written, or
    None when the statement's conditions no longer held."""
    moved = await health.transition(session, update, params, refreshed=refreshed)
    if moved.empty:
        return None, moved
    return await session.get(Authorization, authorization_id, populate_existing=True), moved


async def insert(
    session: AsyncSession,
    authorization_id: uuid.UUID,
    connection_id: uuid.UUID,
    tokens: SealedTokens,
    *,
    scopes: list[str],
) -> Authorization:
    """A new authorization of the connection, with the binding fields and the parameters copied
    from it (one statement: a connection revoked meanwhile gets none)."""
    sql = (
        "INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, scopes, "
        "token_type, access_token_enc, access_token_key_id, refresh_token_enc, refresh_token_key_id, expires_at, "
        "refresh_expires_at, checked_at, status, parameters, metadata) "
        "SELECT :aid, c.id, c.subject_iss, c.subject_sub, c.provider, c.account_id, :scopes, :token_type, "
        ":access_enc, :access_kid, :refresh_enc, :refresh_kid, "
        "CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "     ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        f"{_REFRESH_ENDS_NEW}, now(), '{ACTIVE}', c.parameters, CAST(:metadata AS jsonb) "
        f"FROM connections c WHERE c.id = :cid AND c.status <> '{REVOKED}' "
        "RETURNING *"
    )
    params = {**tokens.params(), "scopes": scopes, "aid": authorization_id, "cid": connection_id}
    result = await _authorizations(session, sql, params)
    return result.scalars().one()  # type: ignore[no-any-return]


async def exists(session: AsyncSession, authorization_id: uuid.UUID) -> bool:
    found = await session.execute(text("SELECT 1 FROM authorizations WHERE id = :id"), {"id": authorization_id})
    return found.first() is not None


async def replace_tokens(
    session: AsyncSession,
    authorization_id: uuid.UUID,
    connection_id: uuid.UUID,
    tokens: SealedTokens,
    *,
    scopes: list[str],
    expiring_seconds: float,
) -> tuple[Authorization | None, health.Moved]:
    """Reauthorize in place: the same authorization (so every grant on it recovers) gets the new
    tokens, only while it is not revoked and still the connection's. A refresh of the old tokens
    still in flight loses its claim here, so its late write cannot replace the new ones. One
    statement with its ``connection.recovered`` events (``service.connections.health``)."""
    ends = _REFRESH_ENDS_NEW
    update = (
        "UPDATE authorizations a SET scopes = :scopes, token_type = :token_type, access_token_enc = :access_enc, "
        "access_token_key_id = :access_kid, refresh_token_enc = :refresh_enc, refresh_token_key_id = :refresh_kid, "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        f"refresh_expires_at = {ends}, health = {health.health_after_tokens(ends, _WINDOW)}, "
        "health_reason = NULL, health_http_status = NULL, checked_at = now(), metadata = CAST(:metadata AS jsonb), "
        f"refresh_claim = NULL, refresh_claimed_until = NULL, status = '{ACTIVE}', updated_at = now() "
        f"FROM (SELECT id, health AS before FROM authorizations WHERE id = :aid AND connection_id = :cid "
        f"AND status <> '{REVOKED}' FOR UPDATE) b WHERE a.id = b.id RETURNING {health.MOVED}"
    )
    params = {**tokens.params(), "scopes": scopes, "expiring_seconds": expiring_seconds}
    params.update(aid=authorization_id, cid=connection_id)
    return await _write_tokens(session, update, params, authorization_id)


async def sync_connection(session: AsyncSession, connection_id: uuid.UUID) -> None:
    """The connection's summary from its authorizations: the union of the live ones' scopes, the
    soonest expiry and the latest refresh of the active ones, and ``active`` while one is active,
    ``reauthorization_required`` while none is but one waits for it; its health is its worst live
    authorization's (``health.SYNC_HEALTH``)."""
    await session.execute(
        text(
            "UPDATE connections c SET scopes = ARRAY(SELECT DISTINCT s FROM authorizations a, unnest(a.scopes) s "
            f"WHERE a.connection_id = c.id AND a.status <> '{REVOKED}' ORDER BY 1), "
            "expires_at = COALESCE((SELECT min(a.expires_at) FROM authorizations a "
            f"WHERE a.connection_id = c.id AND a.status = '{ACTIVE}'), c.expires_at), "
            "refreshed_at = COALESCE((SELECT max(a.refreshed_at) FROM authorizations a "
            "WHERE a.connection_id = c.id), c.refreshed_at), "
            f"status = CASE WHEN c.status = '{REVOKED}' THEN c.status "
            f"WHEN EXISTS (SELECT 1 FROM authorizations a WHERE a.connection_id = c.id AND a.status = '{ACTIVE}') "
            f"THEN '{ACTIVE}' WHEN EXISTS (SELECT 1 FROM authorizations a WHERE a.connection_id = c.id "
            f"AND a.status = '{REAUTHORIZATION_REQUIRED}') THEN '{REAUTHORIZATION_REQUIRED}' ELSE c.status END, "
            "updated_at = now() WHERE c.id = :id"
        ),
        {"id": connection_id},
    )
    await session.execute(text(health.SYNC_HEALTH), {"id": connection_id})


async def live_of_connections(session: AsyncSession, connection_ids: list[uuid.UUID]) -> list[Authorization]:
    """The connections' authorizations that are not revoked, newest first."""
    if not connection_ids:
        return []
    stmt = (
        select(Authorization)
        .where(Authorization.connection_id.in_(connection_ids), Authorization.status != REVOKED)
        .order_by(Authorization.updated_at.desc(), Authorization.id.desc())
        .execution_options(populate_existing=True)
    )
    return list((await session.execute(stmt)).scalars())


async def unreferenced(session: AsyncSession, authorization_ids: list[uuid.UUID]) -> list[Authorization]:
    """Of these live authorizations, those no live grant points at any more (to be retired)."""
    if not authorization_ids:
        return []
    sql = (
        f"SELECT * FROM authorizations a WHERE a.id = ANY(:ids) AND a.status <> '{REVOKED}' AND NOT EXISTS "
        "(SELECT 1 FROM grants g WHERE g.authorization_id = a.id AND g.revoked_at IS NULL)"
    )
    return list((await _authorizations(session, sql, {"ids": authorization_ids})).scalars())


_REVOKE = (
    f"UPDATE authorizations SET status = '{REVOKED}', health = '{HEALTH_REVOKED}', health_reason = :reason, "
    "health_http_status = NULL, checked_at = now(), access_token_enc = NULL, access_token_key_id = NULL, "
    "refresh_token_enc = NULL, refresh_token_key_id = NULL, refresh_claim = NULL, "
    "refresh_claimed_until = NULL, revoked_at = now(), updated_at = now() "
    f"WHERE {{column}} = ANY(:ids) AND status <> '{REVOKED}' RETURNING id"
)


# Why an authorization was revoked (its ``health_reason``).
RETIRED = "retired"  # no live grant pointed at it any more
DISCONNECTED = "revoked_by_server"  # the server client that connected the account disconnected it


async def _revoke(session: AsyncSession, column: str, ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Local revocation always happens, and wipes the ciphertexts rather than keeping dead secrets."""
    if not ids:
        return []
    result = await session.execute(text(_REVOKE.format(column=column)), {"ids": ids, "reason": reason})
    return [r[0] for r in result]


async def mark_revoked(
    session: AsyncSession, authorization_ids: list[uuid.UUID], reason: str = RETIRED
) -> list[uuid.UUID]:
    return await _revoke(session, "id", authorization_ids, reason)


async def revoke_of_connections(
    session: AsyncSession, connection_ids: list[uuid.UUID], reason: str = DISCONNECTED
) -> list[uuid.UUID]:
    """Every authorization of these connections, revoked with them."""
    return await _revoke(session, "connection_id", connection_ids, reason)


# ---- refresh: claim, call the provider holding nothing, write conditionally ---------------------------
@dataclass(frozen=True, slots=True)
class RefreshView:
    """An authorization as a refresh sees it, every flag on the database clock."""

    authorization: Authorization
    account_login: str | None
    due: bool  # expires within the refresh margin
    expired: bool  # already expired
    claimed: bool  # another attempt holds an unexpired claim


async def refresh_view(session: AsyncSession, authorization_id: uuid.UUID, margin_seconds: float) -> RefreshView | None:
    stmt = (
        select(Authorization, Connection.account_login, _due(margin_seconds), _expired(), _claimed())
        .join(Connection, Connection.id == Authorization.connection_id)
        .where(Authorization.id == authorization_id)
        .execution_options(populate_existing=True)
    )
    row = (await session.execute(stmt)).first()
    if row is None:
        return None
    return RefreshView(
        authorization=row[0], account_login=row[1], due=bool(row[2]), expired=bool(row[3]), claimed=bool(row[4])
    )


async def claim_refresh(
    session: AsyncSession,
    authorization_id: uuid.UUID,
    *,
    claim: uuid.UUID,
    hold_seconds: float,
    margin_seconds: float,
    force: bool,
) -> tuple[Authorization, bool] | None:
    """Claim the refresh of an active authorization whose token is still due (any token when
    ``force``) and that no other attempt holds; returns the row as claimed and whether its token
    has expired, or None when another attempt holds it, it was refreshed, or it is not active.

    One statement on any replica: exactly one of many concurrent claimants gets the row. The claim
    lapses by itself at ``refresh_claimed_until``, so a claimant that dies blocks nobody for long.
    """
    conditions = [
        Authorization.id == authorization_id,
        Authorization.status == ACTIVE,
        (Authorization.refresh_claimed_until.is_(None)) | (Authorization.refresh_claimed_until <= func.now()),
    ]
    if not force:
        conditions.append(_due(margin_seconds))
    stmt = (
        update(Authorization)
        .where(*conditions)
        .values(refresh_claim=claim, refresh_claimed_until=func.now() + _seconds(hold_seconds))
        .returning(Authorization, _expired())
        .execution_options(populate_existing=True, synchronize_session=False)
    )
    row = (await session.execute(stmt)).first()
    return None if row is None else (row[0], bool(row[1]))


async def store_refreshed(
    session: AsyncSession,
    authorization_id: uuid.UUID,
    claim: uuid.UUID,
    tokens: SealedTokens,
    *,
    scopes: list[str] | None,
    rotated: bool,
    expiring_seconds: float,
    announce: bool = False,
) -> tuple[Authorization | None, health.Moved]:
    """Write a refresh's result and end its claim — only while the claim is still this attempt's
    and the authorization is active (a reconnect or a revocation in the meantime wins). Working
    tokens make it ``healthy`` again (``expiring`` while its refresh token nears its end), with
    ``connection.recovered`` when it was not (``service.connections.health``). ``scopes`` None
    keeps the ones it had (RFC 6749 §6); ``rotated`` says the provider sent a new refresh token;
    ``announce`` tells the grantees of a refresh that changed no health (``connection.refreshed``)."""
    ends = _REFRESH_ENDS_AFTER
    update = (
        "UPDATE authorizations a SET access_token_enc = :access_enc, access_token_key_id = :access_kid, "
        "refresh_token_enc = COALESCE(:refresh_enc, a.refresh_token_enc), "
        "refresh_token_key_id = COALESCE(:refresh_kid, a.refresh_token_key_id), "
        "token_type = :token_type, scopes = COALESCE(:scopes, a.scopes), "
        # A refresh answer names what it names again (Salesforce's instance_url); the rest stays.
        "metadata = a.metadata || CAST(:metadata AS jsonb), "
        "expires_at = CASE WHEN CAST(:expires_in AS integer) IS NULL THEN NULL "
        "             ELSE now() + make_interval(secs => CAST(:expires_in AS integer)) END, "
        f"refresh_expires_at = {ends}, health = {health.health_after_tokens(ends, _WINDOW)}, "
        "health_reason = CASE WHEN "
        f"COALESCE({ends} <= now() + {_WINDOW}, false) THEN 'refresh_token_expiring' END, "
        "health_http_status = NULL, checked_at = now(), refresh_claim = NULL, refresh_claimed_until = NULL, "
        "refreshed_at = now(), updated_at = now() "
        f"FROM (SELECT id, health AS before FROM authorizations WHERE id = :id AND status = '{ACTIVE}' "
        f"AND refresh_claim = :claim FOR UPDATE) b WHERE a.id = b.id RETURNING {health.MOVED}"
    )
    params = {**tokens.params(), "scopes": scopes, "rotated": rotated, "expiring_seconds": expiring_seconds}
    params.update(id=authorization_id, claim=claim)
    return await _write_tokens(session, update, params, authorization_id, refreshed=announce)


async def release_refresh_claims(session: AsyncSession, authorization_ids: list[uuid.UUID], claim: uuid.UUID) -> None:
    """Give up, in one statement, the claims a pass could not use (rows left for the next pass)."""
    if authorization_ids:
        await session.execute(
            text(
                "UPDATE authorizations SET refresh_claim = NULL, refresh_claimed_until = NULL "
                "WHERE id = ANY(:ids) AND refresh_claim = :claim"
            ),
            {"ids": authorization_ids, "claim": claim},
        )


async def release_refresh_claim(session: AsyncSession, authorization_id: uuid.UUID, claim: uuid.UUID) -> None:
    """Give a claim up early (the call failed): the next caller may try at once."""
    await session.execute(
        text(
            "UPDATE authorizations SET refresh_claim = NULL, refresh_claimed_until = NULL "
            "WHERE id = :id AND refresh_claim = :claim"
        ),
        {"id": authorization_id, "claim": claim},
    )


async def mark_reauthorization_required(
    session: AsyncSession,
    authorization_id: uuid.UUID,
    *,
    reason: str,
    http_status: int | None = None,
    claim: uuid.UUID | None = None,
) -> health.Moved:
    """The provider refused the grant (under this attempt's ``claim``), or the token expired and
    there is no refresh token (``claim`` None: only while that is still so). Wipes the tokens; one
    statement with its ``connection.needs_reauthorization`` events."""
    guard = (
        "id = :id AND refresh_claim = :claim"
        if claim is not None
        else "id = :id AND refresh_token_enc IS NULL AND COALESCE(expires_at <= now(), false)"
    )
    params: dict[str, Any] = {"id": authorization_id, "reason": reason, "http_status": http_status}
    if claim is not None:
        params["claim"] = claim
    moved = await health.transition(session, health.needs_reauthorization_update(guard), params)
    for connection_id in moved.connections:
        await sync_connection(session, connection_id)
    return moved


# ---- the proactive pass (``ConnectionService.refresh_due_once``) --------------------------------------
async def mark_ended(session: AsyncSession, batch: int) -> health.Moved:
    """Up to ``batch`` active authorizations that cannot work any more without a person: the
    refresh token ended (``refresh_token_expired``), or there is none and the access token ended
    (``access_token_expired``). No provider call is needed to know it."""
    ended = health.needs_reauthorization_update("refresh_expires_at <= now()", limit=True)
    first = await health.transition(
        session, ended, {"reason": "refresh_token_expired", "http_status": None, "batch": batch}
    )
    lapsed = health.needs_reauthorization_update("refresh_token_enc IS NULL AND expires_at <= now()", limit=True)
    second = await health.transition(
        session, lapsed, {"reason": "access_token_expired", "http_status": None, "batch": batch}
    )
    for connection_id in sorted({*first.connections, *second.connections}):
        await sync_connection(session, connection_id)
    return health.Moved(
        authorizations=first.authorizations + second.authorizations,
        connections=sorted({*first.connections, *second.connections}),
        told=sorted({*first.told, *second.told}),
        queued=first.queued or second.queued,
        changed={**first.changed, **second.changed},
    )


async def mark_expiring(session: AsyncSession, expiring_seconds: float, batch: int) -> health.Moved:
    """Up to ``batch`` healthy authorizations that end within ``expiring_seconds`` without a person."""
    moved = await health.transition(
        session, health.expiring_update(_WINDOW), {"expiring_seconds": expiring_seconds, "batch": batch}
    )
    for connection_id in moved.connections:
        await sync_connection(session, connection_id)
    return moved


# Bare comparisons (no COALESCE) so the partial indexes of migration 0016 serve them; a NULL
# expiry is simply not due. The idle rule is added only when it is configured: an ``OR`` with a
# clause no index serves would make every pass scan the table.
_CLAIM_DUE = (
    "UPDATE authorizations a SET refresh_claim = :claim, refresh_claimed_until = now() + make_interval(secs => :hold) "
    "FROM (SELECT id FROM authorizations "
    f"WHERE status = '{ACTIVE}' AND refresh_token_enc IS NOT NULL AND refresh_token_key_id IS NOT NULL "
    "AND (refresh_claimed_until IS NULL OR refresh_claimed_until <= now()) "
    "AND (refresh_expires_at IS NULL OR refresh_expires_at > now()) "
    "AND (expires_at <= now() + make_interval(secs => :margin){idle}) "
    "ORDER BY checked_at NULLS FIRST, expires_at NULLS LAST, id LIMIT :batch FOR UPDATE SKIP LOCKED) d "
    "WHERE a.id = d.id RETURNING a.*"
)
_IDLE = " OR COALESCE(refreshed_at, created_at) <= now() - make_interval(secs => CAST(:max_age AS double precision))"


async def claim_due(
    session: AsyncSession,
    *,
    claim: uuid.UUID,
    hold_seconds: float,
    margin_seconds: float,
    max_age_seconds: float | None,
    batch: int,
) -> list[Authorization]:
    """Claim up to ``batch`` authorizations whose token expires within ``margin_seconds`` (or that
    were not refreshed for ``max_age_seconds``), least recently checked first (so one that keeps
    failing does not starve the others), with the very claim the token
    endpoint takes (``claim_refresh``): a row another replica or a request holds is skipped, and
    exactly one claimant refreshes each."""
    params: dict[str, Any] = {"claim": claim, "hold": hold_seconds, "margin": margin_seconds, "batch": batch}
    idle = ""
    if max_age_seconds is not None:
        idle, params["max_age"] = _IDLE, max_age_seconds
    return list((await _authorizations(session, _CLAIM_DUE.format(idle=idle), params)).scalars())


async def note_checked(session: AsyncSession, authorization_ids: list[uuid.UUID]) -> None:
    """A pass tried these and the provider failed (or was resting): checked, health unchanged, so
    the next pass takes the others first."""
    if authorization_ids:
        await session.execute(
            text("UPDATE authorizations SET checked_at = now() WHERE id = ANY(:ids)"), {"ids": authorization_ids}
        )
