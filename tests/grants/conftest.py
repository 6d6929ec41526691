"""Fixtures for grant tests: two real OAuth servers — one the issuer where people sign in, the other
the provider ("Acme") whose accounts get connected, so "the provider saw no authorize request" is a
statement about the provider alone — and two elicitd replicas on one database."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, running_app
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    is_login_page,
    login_at_issuer,
    pytest_runtest_makereport,
    save_screenshot,
)
from tests.support.factories import plant_connection
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer, register_provider

PROVIDER_CLIENT_ID = "elicitd-acme"
PROVIDER_SECRET = "acme-client-secret-for-tests"
# Where the screenshots of the documentation are written when this names a directory
# (``ELICITD_SCREENSHOTS=docs/screenshots``); they always go to tests/artifacts/screenshots.
SCREENSHOTS_ENV = "ELICITD_SCREENSHOTS"


@pytest.fixture(scope="module")
def id_server() -> Iterator[OAuthServer]:
    """Where people sign in (the issuer of the subjects)."""
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def acme() -> Iterator[OAuthServer]:
    """The third-party provider whose accounts are connected."""
    with OAuthServer() as server:
        yield server


@dataclass
class Story:
    app: RunningApp
    replica: RunningApp
    id_server: OAuthServer
    acme: OAuthServer
    provider: str

    @property
    def iss(self) -> str:
        return self.id_server.issuer


async def register_acme(app: RunningApp, server: OAuthServer, name: str) -> None:
    await register_provider(
        app,
        server,
        name,
        client_id=PROVIDER_CLIENT_ID,
        secret=PROVIDER_SECRET,
        display_name="Acme",
        scope_descriptions={"files:read": "Files: read", "files:write": "Files: change and delete"},
    )


@pytest.fixture(scope="module")
async def story(
    make_settings: Callable[..., Settings], id_server: OAuthServer, acme: OAuthServer
) -> AsyncIterator[Story]:
    """Two replicas on one database; the first one's address is the public one."""
    async with running_app(make_settings()) as app:
        await register_issuer(app, id_server)
        name = f"acme-{uuid.uuid4().hex[:6]}"
        await register_acme(app, acme, name)
        async with running_app(app.settings, keep_public_url=True) as replica:
            yield Story(app=app, replica=replica, id_server=id_server, acme=acme, provider=name)


def new_sub(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


async def create_connect_flow(
    story: Story, client: ServerClientHandle, sub: str, *, scopes: list[str] | None = None, expect: int = 201
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "subject": {"iss": story.iss, "sub": sub},
        "kind": "oauth_connect",
        "provider": story.provider,
    }
    if scopes is not None:
        body["scopes"] = scopes
    async with story.app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == expect, response.text
    created: dict[str, Any] = response.json()
    return created


async def token(story: Story, client: ServerClientHandle, sub: str, *, app: RunningApp | None = None) -> httpx.Response:
    async with (app or story.app).http(client.api_key) as http:
        return await http.get(f"/v1/connections/{story.provider}/token", params={"iss": story.iss, "sub": sub})


async def sign_in_if_asked(page: Page, story: Story, sub: str) -> None:
    if await is_login_page(page):
        await login_at_issuer(page, sub, issuer=story.iss)


async def connect_in_browser(page: Page, story: Story, flow_url: str, sub: str, account: str) -> None:
    """Open a connect flow, sign in as ``sub``, Continue, and sign in at Acme as ``account``."""
    await page.goto(flow_url)
    await sign_in_if_asked(page, story, sub)
    await page.locator("#connect-form").wait_for()
    async with page.expect_navigation():
        await page.click("#continue")
    await login_at_issuer(page, account, issuer=story.acme.issuer)
    await page.locator("#outcome").wait_for()


def authorize_calls(server: OAuthServer) -> int:
    return server.stats().authorize_calls


async def flow_events(app: RunningApp, flow_ref: str) -> list[str]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM flow_events WHERE flow_id = CAST(:id AS uuid) ORDER BY id"), {"id": flow_ref[3:]}
        )
        return [r[0] for r in rows]


async def document_screenshot(page: Page, name: str) -> Path:
    """Save a screenshot for the docs: tests/artifacts/screenshots always, and the directory named
    by ``ELICITD_SCREENSHOTS`` when set."""
    path = await save_screenshot(page, name)
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / f"{name}.png")
    return path


async def plant(
    story: Story, sub: str, *, account: str | None = None, scope: str = "files:read"
) -> tuple[str, dict[str, Any]]:
    """A connection of tokens Acme really issued, stored by the service, granted to nobody."""
    login = account or f"{sub}@acme"
    return await plant_connection(
        story.app,
        story.acme,
        story.provider,
        iss=story.iss,
        sub=sub,
        login=login,
        client_id=PROVIDER_CLIENT_ID,
        scope=scope,
    )
