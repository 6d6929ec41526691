"""Admin API over the other domains' tables: providers, issuers and connections. Views come from
those domains' own ``public_view`` functions or name safe columns one by one (never a token or a
client secret, only whether one is set)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get, post
from litestar.params import Parameter
from sqlalchemy import select

from service.admin.deps import unit
from service.admin.pagination import keyset, page
from service.admin.tokens import Role
from service.connections import providers
from service.connections.models import Connection
from service.db.base import CONNECTION_ID
from service.errors import NotFound
from service.identity import issuers

ADMIN = {"role": Role.ADMIN}


class IssuerRef(msgspec.Struct, forbid_unknown_fields=True):
    issuer: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


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
    created_at: datetime


class ConnectionPage(msgspec.Struct):
    items: list[ConnectionView]
    next_cursor: str | None


def connection_view(row: Connection) -> ConnectionView:
    return ConnectionView(id=CONNECTION_ID.format(row.id), provider=row.provider,
                          subject={"iss": row.subject_iss, "sub": row.subject_sub}, account_id=row.account_id,
                          account_login=row.account_login, scopes=list(row.scopes or []), status=row.status,
                          has_refresh_token=row.refresh_token_enc is not None, expires_at=row.expires_at,
                          refreshed_at=row.refreshed_at, created_at=row.created_at)


class AdminProvidersController(Controller):
    path = "/providers"
    tags = ["admin: providers"]

    @get("/", operation_id="adminListProviders", summary="Third-party OAuth providers (never their secrets)")
    async def list_providers(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        async with unit(request) as session:
            return [providers.public_view(p) for p in await providers.list_providers(session)]

    @post("/{name:str}/disable", operation_id="adminDisableProvider", status_code=200, opt=ADMIN,
          summary="Disable a provider: no new connect flows")
    async def disable(self, request: Request[Any, Any, Any], name: str) -> dict[str, Any]:
        return await _set_provider(request, name, False)

    @post("/{name:str}/enable", operation_id="adminEnableProvider", status_code=200, opt=ADMIN,
          summary="Enable a provider")
    async def enable(self, request: Request[Any, Any, Any], name: str) -> dict[str, Any]:
        return await _set_provider(request, name, True)


async def _set_provider(request: Request[Any, Any, Any], name: str, enabled: bool) -> dict[str, Any]:
    async with unit(request) as session:
        if not await providers.set_enabled(session, name, enabled):
            raise NotFound("No provider with this name.")
        row = await providers.get_provider(session, name)
        assert row is not None
        return providers.public_view(row)


class AdminIssuersController(Controller):
    path = "/issuers"
    tags = ["admin: issuers"]

    @get("/", operation_id="adminListIssuers", summary="Trusted identity issuers (never their secrets)")
    async def list_issuers(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        async with unit(request) as session:
            return [issuers.issuer_public_view(i) for i in await issuers.list_issuers(session)]

    @post("/disable", operation_id="adminDisableIssuer", status_code=200, opt=ADMIN,
          summary="Disable an issuer (its browser sessions end at once)")
    async def disable(self, request: Request[Any, Any, Any], data: IssuerRef) -> dict[str, bool]:
        return await _set_issuer(request, data.issuer, False)

    @post("/enable", operation_id="adminEnableIssuer", status_code=200, opt=ADMIN, summary="Enable an issuer")
    async def enable(self, request: Request[Any, Any, Any], data: IssuerRef) -> dict[str, bool]:
        return await _set_issuer(request, data.issuer, True)


async def _set_issuer(request: Request[Any, Any, Any], issuer: str, enabled: bool) -> dict[str, bool]:
    async with unit(request) as session:
        if not await issuers.set_enabled(session, issuer, enabled):
            raise NotFound("No issuer with this URL.")
    return {"enabled": enabled}


class AdminConnectionsController(Controller):
    path = "/connections"
    tags = ["admin: connections"]

    @get("/", operation_id="adminListConnections", summary="Connections, newest first (never their tokens)")
    async def list_connections(self, request: Request[Any, Any, Any], provider: str | None = None,
                               subject_iss: str | None = None, subject_sub: str | None = None,
                               status: str | None = None, cursor: str | None = None,
                               limit: Annotated[int, Parameter(ge=1, le=500)] = 50) -> ConnectionPage:
        stmt = select(Connection)
        for column, value in ((Connection.provider, provider), (Connection.subject_iss, subject_iss),
                              (Connection.subject_sub, subject_sub), (Connection.status, status)):
            if value is not None:
                stmt = stmt.where(column == value)
        async with unit(request) as session:
            rows = (await session.execute(keyset(stmt, Connection.id, cursor, limit))).scalars().all()
        items, next_cursor = page(rows, limit, lambda c: c.id)
        return ConnectionPage(items=[connection_view(c) for c in items], next_cursor=next_cursor)

    @get("/{connection_id:str}", operation_id="adminGetConnection", summary="One connection (never its tokens)")
    async def show(self, request: Request[Any, Any, Any], connection_id: str) -> ConnectionView:
        parsed = CONNECTION_ID.parse(connection_id)
        async with unit(request) as session:
            row = None if parsed is None else await session.get(Connection, parsed)
        if row is None:
            raise NotFound("No connection with this id.")
        return connection_view(row)


DIRECTORY_CONTROLLERS = [AdminProvidersController, AdminIssuersController, AdminConnectionsController]
