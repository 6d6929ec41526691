from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from service.apikeys.providers import upsert_api_key_provider
from service.settings import Settings
from tests.consent.helpers import kinds_app
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    pytest_runtest_makereport,
)
from tests.support.oauth_server import OAuthServer


@pytest.fixture(scope="module")
def issuer() -> Iterator[OAuthServer]:
    """Both the login issuer and the API-key provider: its ``/api/me`` accepts tokens it minted,
    which stand in for API keys in the live check."""
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def app(make_settings: Callable[..., Settings], issuer: OAuthServer) -> AsyncIterator[RunningApp]:
    async with kinds_app(make_settings, issuer) as running:
        yield running


@pytest.fixture(scope="module")
async def provider(app: RunningApp, issuer: OAuthServer) -> str:
    name = f"acme-{uuid.uuid4().hex[:6]}"
    async with app.state.sessions() as session:
        await upsert_api_key_provider(
            session,
            name,
            "Acme API",
            {
                "key_label": "API key",
                "help": "Create a key under Settings → API keys.",
                "min_length": 20,
                "max_length": 100,
                "pattern": r"^[A-Za-z0-9._~+/=-]+$",
                "fields": [
                    {"name": "region", "label": "Region", "choices": ["eu", "us"]},
                    {"name": "account", "label": "Account id", "required": False, "pattern": r"^[0-9]{4,12}$"},
                ],
                "account_field": "account",
                "check": {"url": issuer.url("/api/me"), "auth": "bearer"},
            },
        )
        await session.commit()
    return name


@pytest.fixture
async def client(app: RunningApp) -> ServerClientHandle:
    return await new_server_client(app, display_name="Acme Ops Assistant")
