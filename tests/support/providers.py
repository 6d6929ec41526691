"""A real OAuth server made known to an elicitd instance: as the users' issuer, as a provider to
connect. Connections of that server's tokens are planted by ``tests/support/factories.py``.

Each goes through the domain's own code (``upsert_issuer``, ``upsert_provider``), so a row is
sealed and cached exactly as one an operator saves.
"""

from __future__ import annotations

from typing import Any

from service.connections.providers import ProviderSpec, upsert_provider
from service.identity import sessions as store
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


async def signed_in_for(app: RunningApp, issuer: IssuerConfig, provider: ProviderSpec, sub: str) -> str:
    """``issuer`` and ``provider`` saved, and ``sub`` signed in at that issuer with no login round
    (the browser session made directly): the session cookie's value."""
    async with app.state.sessions() as session:
        issuer_id = await upsert_issuer(session, app.state.vault, issuer)
        await upsert_provider(session, provider, app.state.vault)
        cookie = await store.create_browser_session(
            session, issuer_id=issuer_id, iss=issuer.issuer, sub=sub, lifetime=600
        )
        await session.commit()
    return cookie
