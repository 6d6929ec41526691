"""The whole connect flow in a real headless Chromium against a real OAuth server process."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from playwright.async_api import Page

from tests.connections.conftest import (
    Env,
    connection_rows,
    continue_to_provider,
    create_flow,
    flow_events,
    flow_row,
    get_token,
    new_sub,
    open_connect_page,
    provider_token_calls,
)
from tests.support.apps import ServerClientHandle
from tests.support.browser import save_screenshot

pytestmark = pytest.mark.browser


async def test_connect_end_to_end(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("alice")
    created = await create_flow(env, client, sub, scopes=["files:read"])
    flow = created["flow"]
    assert (
        created["mcp"]["inputRequests"][f"elicitd_{flow['id']}"]["params"]["message"]
        == "Connect your Test Files account to continue."
    )
    calls_before = provider_token_calls(env.oauth)

    async def resolve() -> httpx.Response:
        async with env.app.http(client.api_key) as http:
            return await http.post(
                "/v1/flows/resolve",
                json={
                    "subject": {"iss": env.iss, "sub": sub},
                    "request_state": created["mcp"]["requestState"],
                    "input_responses": {f"elicitd_{flow['id']}": {"action": "accept"}},
                    "wait_seconds": 60,
                },
            )

    waiter = asyncio.create_task(resolve())
    await open_connect_page(browser_page, env, flow["url"], sub)
    body = await browser_page.inner_text("main")
    assert "Acme Files Assistant" in body and "Test Files" in body and "See your files" in body
    assert env.app.url in body  # the elicitd domain is shown
    await save_screenshot(browser_page, "connect-page")
    authorize_url = await continue_to_provider(browser_page, env)
    query = httpx.URL(authorize_url).params
    assert query["code_challenge_method"] == "S256" and query["code_challenge"]
    assert query["redirect_uri"] == env.app.url + "/connect/callback"
    assert query["scope"] == "files:read"
    from tests.support.browser import login_at_issuer

    await login_at_issuer(browser_page, sub, issuer=env.iss)
    await browser_page.locator("#outcome").wait_for()
    assert browser_page.url == f"{env.app.url}/connect/done/{flow['id']}"
    assert await browser_page.inner_text("#outcome") == "Connected"
    assert "You can return to Acme Files Assistant" in await browser_page.inner_text("#return")
    assert await browser_page.locator("script").count() == 0
    await save_screenshot(browser_page, "connect-done-page")

    resolved = await asyncio.wait_for(waiter, 30)
    assert resolved.status_code == 200
    answer = resolved.json()
    assert answer["outcome"] == "completed"
    result = answer["result"]
    assert result["connection_id"].startswith("cn_")
    assert result["account_id"] == env.oauth.account_id(sub)
    assert result["account_login"] == sub
    assert result["scopes"] == ["files:read"]
    assert "access_token" not in str(answer) and "refresh_token" not in str(answer)
    assert provider_token_calls(env.oauth) == calls_before + 1

    token = await get_token(env, client, sub)
    assert token.status_code == 200, token.text
    issued = token.json()
    assert issued["connection_id"] == result["connection_id"]
    me = env.oauth.http.get("/api/me", headers={"Authorization": f"Bearer {issued['access_token']}"})
    assert me.status_code == 200
    assert me.json()["id"] == env.oauth.account_id(sub)

    # Already connected with those scopes: completed at once, no new flow.
    again = await create_flow(env, client, sub, scopes=["files:read"], expect=200)
    assert again["status"] == "completed"
    assert again["result"]["connection_id"] == result["connection_id"]
    assert "mcp" not in again


async def test_decline_on_connect_page(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("dora")
    flow = (await create_flow(env, client, sub))["flow"]
    await open_connect_page(browser_page, env, flow["url"], sub)
    async with browser_page.expect_navigation():
        await browser_page.click("#decline")
    assert await browser_page.inner_text("#outcome") == "Not connected"
    assert (await flow_row(env.app, flow["id"]))["status"] == "declined"
    assert "provider_redirect" not in [e["type"] for e in await flow_events(env.app, flow["id"])]
    assert await connection_rows(env.app, sub) == []


async def test_provider_access_denied_declines(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    from tests.support.browser import deny_at_issuer

    sub = new_sub("erin")
    flow = (await create_flow(env, client, sub))["flow"]
    calls = provider_token_calls(env.oauth)
    await open_connect_page(browser_page, env, flow["url"], sub)
    await continue_to_provider(browser_page, env)
    await deny_at_issuer(browser_page, issuer=env.iss)
    assert await browser_page.inner_text("#outcome") == "Not connected"
    row = await flow_row(env.app, flow["id"])
    assert (row["status"], row["error_code"]) == ("declined", "access_denied")
    assert provider_token_calls(env.oauth) == calls
    assert await connection_rows(env.app, sub) == []


async def test_provider_error_fails_with_code(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("fay")
    flow = (await create_flow(env, client, sub))["flow"]
    calls = provider_token_calls(env.oauth)
    await open_connect_page(browser_page, env, flow["url"], sub)
    # The provider answers the authorization request itself with an error (no login form).
    env.oauth.fail_next_authorize("temporarily_unavailable")
    await browser_page.click("#continue")
    await browser_page.locator("#outcome").wait_for()
    assert await browser_page.inner_text("#outcome") == "The connection failed"
    row = await flow_row(env.app, flow["id"])
    assert (row["status"], row["error_code"]) == ("failed", "provider_temporarily_unavailable")
    assert provider_token_calls(env.oauth) == calls
    events: list[dict[str, Any]] = await flow_events(env.app, flow["id"])
    assert events[-1]["to_status"] == "failed"
