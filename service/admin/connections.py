"""Connections for operators: list, show, revoke (at the provider and here), force a refresh.

Each connection shows its health (``healthy | expiring | needs_reauthorization | revoked``, with
the reason and times), and ``show`` each of its authorizations' (``service.connections.health``).

Views name safe columns one by one: never a token, only whether a refresh token is held. Revoke
and refresh go through ``ConnectionService`` (``revoke_by_id``, ``refresh_by_id``), the very code
behind the MCP-server API, so a forced refresh takes the same row lock as the token endpoint.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.views import columns
from service.connections.models import HEALTH_STATES, REVOKED, Authorization, Connection
from service.connections.service import ConnectionService
from service.db.base import CONNECTION_ID
from service.db.pagination import keyset, page
from service.errors import ConnectionNotFound, InvalidRequest


class AuthorizationView(msgspec.Struct):
    """One token set of the connection (never its tokens)."""

    id: str
    scopes: list[str]
    status: str
    # ``healthy | expiring | needs_reauthorization | revoked``, why, and when (docs/connections.md).
    health: str
    health_reason: str | None
    health_http_status: int | None
    checked_at: datetime | None
    expires_at: datetime | None
    refresh_expires_at: datetime | None
    has_refresh_token: bool
    refreshed_at: datetime | None
    revoked_at: datetime | None


class ConnectionView(msgspec.Struct):
    id: str
    provider: str
    subject: dict[str, str]
    account_id: str
    account_login: str | None
    scopes: list[str]
    status: str
    has_refresh_token: bool
    expires_at: datetime | None
    refreshed_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    # The worst of its live authorizations' health, with its reason and times (revoked: revoked).
    health: str
    health_reason: str | None
    health_http_status: int | None
    checked_at: datetime | None
    refresh_expires_at: datetime | None
    # Only in ``show`` (one connection): each authorization with its own health.
    authorizations: list[AuthorizationView] | None = None


class ConnectionPage(msgspec.Struct):
    items: list[ConnectionView]
    next_cursor: str | None


class ConnectionRevoked(msgspec.Struct):
    connection: ConnectionView
    revoked: bool  # false when it was already revoked
    revoked_at_provider: bool


def authorization_view(row: Authorization) -> AuthorizationView:
    return columns(
        AuthorizationView,
        row,
        id=CONNECTION_ID.format(row.id),
        scopes=sorted(row.scopes or []),
        has_refresh_token=row.refresh_token_enc is not None,
    )


def connection_view(
    row: Connection, authorizations: list[Authorization] | None = None, *, has_refresh_token: bool | None = None
) -> ConnectionView:
    """``has_refresh_token``: whether a live authorization holds one (OAuth tokens live there since
    migration 0012) — from ``authorizations`` when given, else as the caller found it, else the
    connection row's own (an API key's connection has none)."""
    if has_refresh_token is None:
        if authorizations is not None:
            has_refresh_token = any(a.refresh_token_enc is not None and a.status != REVOKED for a in authorizations)
        else:
            has_refresh_token = row.refresh_token_enc is not None
    return columns(
        ConnectionView,
        row,
        id=CONNECTION_ID.format(row.id),
        subject={"iss": row.subject_iss, "sub": row.subject_sub},
        scopes=list(row.scopes or []),
        has_refresh_token=has_refresh_token,
        authorizations=None if authorizations is None else [authorization_view(a) for a in authorizations],
    )


def _id(connection_id: str) -> uuid.UUID:
    parsed = CONNECTION_ID.parse(connection_id)
    if parsed is None:
        raise ConnectionNotFound("No connection with this id.")
    return parsed


async def list_connections(
    session: AsyncSession,
    *,
    provider: str | None = None,
    subject_iss: str | None = None,
    subject_sub: str | None = None,
    status: str | None = None,
    health: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> ConnectionPage:
    if health is not None and health not in HEALTH_STATES:
        raise InvalidRequest(f"'health' is one of {', '.join(HEALTH_STATES)}.", extra={"code": "invalid_health"})
    stmt = select(Connection)
    for column, value in (
        (Connection.provider, provider),
        (Connection.subject_iss, subject_iss),
        (Connection.subject_sub, subject_sub),
        (Connection.status, status),
        (Connection.health, health),
    ):
        if value is not None:
            stmt = stmt.where(column == value)
    rows = (await session.execute(keyset(stmt, Connection.id, cursor, limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda c: c.id)
    refreshable = set(
        (
            await session.execute(
                select(Authorization.connection_id).where(
                    Authorization.connection_id.in_([c.id for c in items]),
                    Authorization.status != REVOKED,
                    Authorization.refresh_token_enc.is_not(None),
                )
            )
        ).scalars()
    )
    return ConnectionPage(
        items=[
            connection_view(c, has_refresh_token=c.id in refreshable or c.refresh_token_enc is not None) for c in items
        ],
        next_cursor=next_cursor,
    )


async def show_connection(session: AsyncSession, connection_id: str) -> ConnectionView:
    row = await session.get(Connection, _id(connection_id), populate_existing=True)
    if row is None:
        raise ConnectionNotFound("No connection with this id.")
    stmt = (
        select(Authorization)
        .where(Authorization.connection_id == row.id)
        .order_by(Authorization.created_at, Authorization.id)
        .execution_options(populate_existing=True)
    )
    return connection_view(row, list((await session.execute(stmt)).scalars()))


async def revoke_connection(service: ConnectionService, connection_id: str) -> ConnectionRevoked:
    parsed = _id(connection_id)
    outcome = await service.revoke_by_id(parsed)
    if outcome is None:
        raise ConnectionNotFound("No connection with this id.")
    async with service.sessions() as session:
        view = await show_connection(session, connection_id)
    return ConnectionRevoked(
        connection=view, revoked=bool(outcome.revoked), revoked_at_provider=outcome.revoked_at_provider
    )


async def refresh_connection(service: ConnectionService, connection_id: str) -> ConnectionView:
    """409 ``reauthorization_required`` / ``no_refresh_token``, 404 ``not_connected`` when revoked,
    502 ``provider_refresh_failed``: the token endpoint's own answers."""
    row = await service.refresh_by_id(_id(connection_id))
    if row is None:
        raise ConnectionNotFound("No connection with this id.")
    async with service.sessions() as session:
        return await show_connection(session, connection_id)
