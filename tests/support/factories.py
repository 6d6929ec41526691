"""Test data, made the way the service makes it: one place for the rows many tests plant.

A connection is stored by ``ConnectionService.store_authorization`` (sealed, counted and announced
exactly as a connect callback stores one), of tokens a real OAuth server issued (``mint``), so
refresh and revocation then work against that server for real; a grant goes through the grants
repository as a completed flow leaves it. Each test package's own helpers (``tests/connections``'s
``plant_connection(env, …)``, ``tests/grants``'s ``plant(story, …)``, ``tests/admin``'s
``make_connection``) only fill in their fixtures' servers and names. Tests of who is told what
(``tests/events``) plant rows without tokens on a provider nobody answers.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text

from service.connections import oauth as provider_oauth
from service.connections.providers import ProviderSpec, upsert_provider
from service.db.base import uuid7
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer


async def offline_provider(app: RunningApp) -> str:
    """A provider row whose endpoints nobody answers (``files.example.com``), for tests that
    never call it; its new name."""
    name = f"files-{uuid.uuid4().hex[:8]}"
    spec = ProviderSpec(
        name=name,
        catalog="oauth2",
        display_name="Files",
        authorization_endpoint="https://files.example.com/authorize",
        token_endpoint="https://files.example.com/token",
        client_id="elicitd",
        client_secret="secret",
    )
    async with app.state.sessions() as session:
        await upsert_provider(session, spec, app.state.vault)
        await session.commit()
    return name


async def connection_granted_to(
    app: RunningApp, provider: str, iss: str, sub: str, account: str, *clients: ServerClientHandle
) -> uuid.UUID:
    """The rows of a connection of ``sub`` with ``files:read`` and an admin grant to each of
    ``clients``, without tokens: for tests of who is told what, which never use one."""
    connection_id = uuid7()
    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, scopes) "
                "VALUES (:id, :iss, :sub, :provider, :account, '{files:read}')"
            ),
            {"id": connection_id, "iss": iss, "sub": sub, "provider": provider, "account": account},
        )
        for client in clients:
            await session.execute(
                text(
                    "INSERT INTO grants (id, connection_id, server_client_id, scopes, origin) "
                    "VALUES (:id, :connection, :client, '{files:read}', 'admin')"
                ),
                {"id": uuid7(), "connection": connection_id, "client": client.id},
            )
        await session.commit()
    return connection_id


def token_set(
    access_token: str,
    refresh_token: str | None,
    *,
    scope: str = "files:read",
    expires_in: int = 3600,
    raw: dict[str, Any] | None = None,
) -> provider_oauth.TokenSet:
    """A provider's token answer as the connect callback reads it."""
    return provider_oauth.TokenSet(
        access_token=access_token,
        refresh_token=refresh_token,
        token_type="Bearer",
        expires_in=expires_in,
        scope=scope,
        raw=raw or {},
    )


async def store_connection(
    app: RunningApp,
    provider: str,
    tokens: provider_oauth.TokenSet,
    *,
    iss: str,
    sub: str,
    account_id: str,
    account_login: str,
    requested: list[str],
    connected_by: uuid.UUID | None = None,
) -> str:
    """The connection ``store_authorization`` makes of ``tokens``, granted to nobody (recorded as
    connected by ``connected_by``, as a connect flow of that client records it); its ``cn_`` id."""
    service = app.state.connections
    async with app.state.sessions() as session:
        resolved = await service.provider(provider)
        done = await service.store_authorization(
            session,
            iss=iss,
            sub=sub,
            provider=resolved,
            tokens=tokens,
            account_id=account_id,
            account_login=account_login,
            requested=requested,
            reconnect=None,
            connected_by=connected_by,
        )
        await session.commit()
    return str(done.result["connection_id"])


async def plant_connection(
    app: RunningApp,
    server: OAuthServer,
    provider: str,
    *,
    iss: str,
    sub: str,
    login: str,
    client_id: str,
    scope: str = "files:read",
    expires_in: int = 3600,
    with_refresh: bool = True,
    connected_by: uuid.UUID | None = None,
) -> tuple[str, dict[str, Any]]:
    """A connection of ``sub`` (at ``iss``) to ``login``'s account at ``server``, of tokens the
    server really issued (``mint``) to ``client_id`` (its refresh token kept unless
    ``with_refresh`` is false); the connection's id and the minted tokens."""
    minted = server.mint(login, client_id=client_id, scope=scope)
    tokens = token_set(
        minted["access_token"],
        minted["refresh_token"] if with_refresh else None,
        scope=scope,
        expires_in=expires_in,
        raw=minted,
    )
    connection = await store_connection(
        app,
        provider,
        tokens,
        iss=iss,
        sub=sub,
        account_id=server.account_id(login),
        account_login=login,
        requested=scope.split(),
        connected_by=connected_by,
    )
    return connection, minted


async def grant_connection(app: RunningApp, connection_ref: str, client_id: uuid.UUID, scopes: list[str]) -> None:
    """A grant of ``client_id`` (or its trust group) on the connection, as a completed flow leaves
    one: pointing at the authorization holding exactly ``scopes`` when there is one, else at the
    newest active one (a grant narrower than its token, which the token endpoint refuses)."""
    from service.db.base import CONNECTION_ID
    from service.grants import repository as grants_repo

    connection_id = CONNECTION_ID.parse(connection_ref)
    assert connection_id is not None
    async with app.state.sessions() as session:
        held = await grants_repo.active_authorizations(session, connection_id)
        exact = [a for a in held if a.scopes == frozenset(scopes)]
        chosen = exact[0] if exact else (max(held, key=lambda a: a.id) if held else None)
        grantee = await grants_repo.grantee_of(session, client_id)
        made = await grants_repo.give(
            session,
            vault=app.state.vault,
            connection_id=connection_id,
            authorization_id=chosen.id if chosen is not None else None,
            grantee=grantee,
            scopes=scopes,
            origin="flow",
        )
        assert made is not None
        await session.commit()
