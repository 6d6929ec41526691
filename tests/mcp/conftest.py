"""Fixtures for the MCP tests: the real OAuth/OIDC server (issuer of the MCP client's tokens and
third-party provider) and headless Chromium."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

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
from tests.support.providers import register_issuer, register_provider

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
        await register_issuer(app, oauth_server)
        name = f"files-{uuid.uuid4().hex[:8]}"
        await register_provider(
            app,
            oauth_server,
            name,
            client_id=PROVIDER_CLIENT_ID,
            secret=PROVIDER_SECRET,
            scope_descriptions={"files:read": "See your files"},
        )
        yield OAuthEnv(app=app, oauth=oauth_server, provider=name)
