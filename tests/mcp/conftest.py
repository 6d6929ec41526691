"""Fixtures for the MCP tests: the real OAuth/OIDC server (issuer of the MCP client's tokens and
third-party provider) and headless Chromium."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from service.connections.providers import ProviderSpec, upsert_provider
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.settings import Settings
from tests.support.apps import RunningApp, running_app
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    pytest_runtest_makereport,
)
from tests.support.oauth_server import (
    OAuthServer,
    oauth_server,  # noqa: F401 (fixture)
)

PROVIDER_CLIENT_ID = "elicitd-files"
PROVIDER_SECRET = "files-secret-for-mcp-tests"


@dataclass
class OAuthEnv:
    """elicitd with the test OAuth server registered as the users' issuer *and* as a provider."""

    app: RunningApp
    oauth: OAuthServer
    provider: str

    @property
    def iss(self) -> str:
        return self.oauth.issuer


@pytest.fixture(scope="module")
async def oauth_env(make_settings: Callable[..., Settings], oauth_server: OAuthServer) -> AsyncIterator[OAuthEnv]:  # noqa: F811 (fixture)
    async with running_app(make_settings()) as app:
        async with app.state.sessions() as session:
            await upsert_issuer(
                session,
                app.state.vault,
                IssuerConfig(issuer=oauth_server.issuer, client_id="elicitd-login", display_name="Test ID"),
            )
            name = f"files-{uuid.uuid4().hex[:8]}"
            await upsert_provider(
                session,
                ProviderSpec(
                    name=name,
                    catalog="oauth2",
                    display_name="Test Files",
                    issuer=oauth_server.issuer,
                    account_endpoint=oauth_server.url("/api/me"),
                    account_id_field="id",
                    account_login_field="login",
                    client_id=PROVIDER_CLIENT_ID,
                    client_secret=PROVIDER_SECRET,
                    default_scopes=("files:read",),
                    scope_descriptions={"files:read": "See your files"},
                ),
                app.state.vault,
            )
            await session.commit()
        app.state.issuers.forget()
        oauth_server.register_client(PROVIDER_CLIENT_ID, PROVIDER_SECRET, redirect_uris=[app.url + "/connect/callback"])
        yield OAuthEnv(app=app, oauth=oauth_server, provider=name)
