"""A real OAuth server made known to an elicitd instance — as the users' issuer, as a provider to
connect — and connections planted of tokens that server really issued.

Each goes through the domain's own code (``upsert_issuer``, ``upsert_provider``,
``ConnectionService.store_authorization``), so a planted row is sealed, counted and announced
exactly as one a connect flow stores.
"""

from __future__ import annotations

import uuid
from typing import Any

from service.connections import oauth as provider_oauth
from service.connections.providers import ProviderSpec, upsert_provider
from service.identity.issuers import IssuerConfig, upsert_issuer
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer


async def register_issuer(app: RunningApp, server: OAuthServer) -> None:
    """``server`` as a trusted issuer of subjects (browser login), with no stale metadata cached."""
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(issuer=server.issuer, client_id="elicitd-login", display_name="Test ID"),
        )
        await session.commit()
    app.state.issuers.forget()


async def register_provider(
    app: RunningApp,
    server: OAuthServer,
    name: str,
    *,
    client_id: str,
    secret: str,
    display_name: str = "Test Files",
    callback: bool = True,
    **overrides: Any,
) -> None:
    """``server`` as provider ``name`` (scope ``files:read`` by default), and elicitd as its
    registered client; ``callback`` registers elicitd's connect callback as its redirect URI."""
    default_scopes = overrides.pop("default_scopes", ("files:read",))
    spec = ProviderSpec(
        name=name,
        catalog="oauth2",
        display_name=display_name,
        issuer=server.issuer,
        account_endpoint=server.url("/api/me"),
        account_id_field="id",
        account_login_field="login",
        client_id=client_id,
        client_secret=secret,
        default_scopes=default_scopes,
        **overrides,
    )
    async with app.state.sessions() as session:
        await upsert_provider(session, spec, app.state.vault)
        await session.commit()
    redirect_uris = [app.url + "/connect/callback"] if callback else []
    server.register_client(client_id, secret, redirect_uris=redirect_uris)


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
    connected_by: uuid.UUID | None = None,
) -> tuple[str, dict[str, Any]]:
    """A connection of ``sub`` (at ``iss``) to ``login``'s account at ``server``, of tokens the
    server really issued (``mint``) to ``client_id``; the connection's id and the minted tokens."""
    minted = server.mint(login, client_id=client_id, scope=scope)
    tokens = provider_oauth.TokenSet(
        access_token=minted["access_token"],
        refresh_token=minted["refresh_token"],
        token_type="Bearer",
        expires_in=expires_in,
        scope=scope,
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
