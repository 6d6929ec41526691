from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

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
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def app(make_settings: Callable[..., Settings], issuer: OAuthServer) -> AsyncIterator[RunningApp]:
    async with kinds_app(make_settings, issuer) as running:
        yield running


@pytest.fixture
async def client(app: RunningApp) -> ServerClientHandle:
    return await new_server_client(app, display_name="Acme Travel Assistant")
