"""Fixtures for connection tests: one real OAuth/OIDC server process that is both the issuer (the
browser login) and the third-party provider, an elicitd instance with both registered, and
helpers that drive the real browser through a connect flow."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.settings import Settings
from tests.support import factories, providers
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    login_at_issuer,
    pytest_runtest_makereport,
)
from tests.support.factories import grant_connection
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer

PROVIDER_CLIENT_ID = "elicitd-files"
PROVIDER_SECRET = "files-client-secret-for-tests"


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    """This module's own OAuth server: issuer and provider at once, with its own counters."""
    with OAuthServer() as server:
        yield server


@dataclass
class Env:
    app: RunningApp
    oauth: OAuthServer
    provider: str

    @property
    def iss(self) -> str:
        return self.oauth.issuer


async def register_provider(
    app: RunningApp,
    server: OAuthServer,
    name: str,
    *,
    client_id: str = PROVIDER_CLIENT_ID,
    secret: str = PROVIDER_SECRET,
    **overrides: Any,
) -> None:
    await providers.register_provider(
        app,
        server,
        name,
        client_id=client_id,
        secret=secret,
        scope_descriptions={"files:read": "See your files", "files:write": "Change and delete your files"},
        **overrides,
    )


@pytest.fixture(scope="module")
async def env(make_settings: Callable[..., Settings], oauth: OAuthServer) -> AsyncIterator[Env]:
    async with running_app(make_settings()) as app:
        await register_issuer(app, oauth)
        name = f"files-{uuid.uuid4().hex[:8]}"
        await register_provider(app, oauth, name)
        yield Env(app=app, oauth=oauth, provider=name)


@pytest.fixture
async def client(env: Env) -> ServerClientHandle:
    return await new_server_client(env.app, display_name="Acme Files Assistant")


def new_sub(name: str = "user") -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def create_flow(
    env: Env,
    client: ServerClientHandle,
    sub: str,
    *,
    scopes: list[str] | None = None,
    expect: int | None = 201,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "subject": {"iss": env.iss, "sub": sub},
        "kind": "oauth_connect",
        "provider": env.provider,
        **extra,
    }
    if scopes is not None:
        body["scopes"] = scopes
    async with env.app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    if expect is not None:
        assert response.status_code == expect, response.text
    result: dict[str, Any] = response.json()
    return result


async def get_token(
    env: Env, client: ServerClientHandle, sub: str, app: RunningApp | None = None, **params: str
) -> httpx.Response:
    async with (app or env.app).http(client.api_key) as http:
        return await http.get(f"/v1/connections/{env.provider}/token", params={"iss": env.iss, "sub": sub, **params})


async def open_connect_page(page: Page, env: Env, flow_url: str, sub: str) -> None:
    """Open the flow URL and log in at the issuer; ends on the connect page."""
    await page.goto(flow_url)
    await login_at_issuer(page, sub, issuer=env.iss)
    await page.locator("#connect-form").wait_for()


async def continue_to_provider(page: Page, env: Env) -> str:
    """Press Continue; returns the provider's authorization URL the browser landed on."""
    async with page.expect_navigation():
        await page.click("#continue")
    await page.locator("form#login").wait_for()
    assert page.url.startswith(env.oauth.url("/authorize"))
    return page.url


async def connect_in_browser(
    page: Page, env: Env, flow_url: str, sub: str, *, provider_user: str | None = None
) -> None:
    await open_connect_page(page, env, flow_url, sub)
    await continue_to_provider(page, env)
    await login_at_issuer(page, provider_user or sub, issuer=env.iss)
    await page.locator("#outcome").wait_for()


async def connection_rows(app: RunningApp, sub: str) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT * FROM authorizations WHERE subject_sub = :s ORDER BY id"), {"s": sub}
        )
        return [dict(r._mapping) for r in rows]


async def flow_row(app: RunningApp, flow_ref: str) -> dict[str, Any]:
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text("SELECT * FROM flows WHERE 'fl_' || replace(id::text, '-', '') = :f"), {"f": flow_ref}
            )
        ).first()
        assert row is not None
        return dict(row._mapping)


async def flow_events(app: RunningApp, flow_ref: str) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, actor, to_status, detail FROM flow_events "
                "WHERE 'fl_' || replace(flow_id::text, '-', '') = :f ORDER BY id"
            ),
            {"f": flow_ref},
        )
        return [dict(r._mapping) for r in rows]


def provider_token_calls(
    server: OAuthServer, grant_type: str = "authorization_code", client_id: str = PROVIDER_CLIENT_ID
) -> int:
    """Token endpoint calls made *as the provider's client* (the issuer login uses another client)."""
    return sum(1 for r in server.token_requests() if r.grant_type == grant_type and r.client_id == client_id)


async def plant_connection(
    env: Env,
    sub: str,
    *,
    granted_to: ServerClientHandle | None = None,
    provider_user: str | None = None,
    expires_in: int = 3600,
    scope: str = "files:read",
) -> tuple[str, dict[str, Any]]:
    """A connection made of tokens the provider really issued (``mint``), stored by the service,
    and (``granted_to``) granted to a server client for its scopes, as a connect flow would."""
    user = provider_user or sub
    connection, minted = await factories.plant_connection(
        env.app,
        env.oauth,
        env.provider,
        iss=env.iss,
        sub=sub,
        login=user,
        client_id=PROVIDER_CLIENT_ID,
        scope=scope,
        expires_in=expires_in,
        connected_by=granted_to.id if granted_to is not None else None,
    )
    if granted_to is not None:
        await grant(env.app, connection, granted_to, scope.split())
    return connection, minted


async def grant(app: RunningApp, connection_ref: str, client: ServerClientHandle, scopes: list[str]) -> None:
    """What a completed connect flow of ``client`` leaves behind: its grant on the connection."""
    await grant_connection(app, connection_ref, client.id, scopes)


async def expire_soon(env: Env, connection_ref: str) -> None:
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "UPDATE authorizations SET expires_at = now() + interval '5 seconds' "
                "WHERE 'cn_' || replace(id::text, '-', '') = :c"
            ),
            {"c": connection_ref},
        )
        await session.commit()


def accepted_by_provider(env: Env, token: str) -> bool:
    return env.oauth.http.get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200
