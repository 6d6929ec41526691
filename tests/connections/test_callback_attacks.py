"""Attacks on the connect flow. Each one must end with no call to the provider's token endpoint
(as elicitd's provider client) and nothing stored; the flow stays usable where it should."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
import pytest
from playwright.async_api import Browser, Page
from sqlalchemy import text

from tests.connections.conftest import (
    Env,
    connection_rows,
    continue_to_provider,
    create_flow,
    flow_events,
    flow_row,
    new_sub,
    provider_token_calls,
)
from tests.support.apps import ServerClientHandle
from tests.support.browser import is_login_page, login_at_issuer, new_context, save_screenshot

pytestmark = pytest.mark.browser


async def goto_connect(page: Page, env: Env, flow_url: str, sub: str) -> None:
    await page.goto(flow_url)
    if await is_login_page(page):
        await login_at_issuer(page, sub, issuer=env.iss)
    await page.locator("#connect-form").wait_for()


async def genuine_callback(page: Page, env: Env, flow_url: str, sub: str) -> httpx.URL:
    """Continue to the provider, then let the provider redirect back *without* the browser: the
    test holds the real callback URL (code, state, iss) and can tamper with it."""
    await goto_connect(page, env, flow_url, sub)
    authorize_url = await continue_to_provider(page, env)
    back = env.oauth.login_without_browser(authorize_url, sub)
    assert back.path == "/connect/callback" and {"code", "state", "iss"} <= set(back.params.keys())
    return back


def tampered(url: httpx.URL, **changes: str | None) -> str:
    params = dict(url.params)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return f"{url.scheme}://{url.netloc.decode()}{url.path}?{urlencode(params)}"


async def assert_nothing_happened(env: Env, sub: str, flow_ref: str, calls_before: int) -> None:
    assert provider_token_calls(env.oauth) == calls_before
    assert await connection_rows(env.app, sub) == []
    assert (await flow_row(env.app, flow_ref))["status"] == "pending"


async def test_another_user_opens_the_url(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    victim, mallory = new_sub("victim"), new_sub("mallory")
    flow = (await create_flow(env, client, victim))["flow"]
    calls = provider_token_calls(env.oauth)
    response = await browser_page.goto(flow["url"])
    assert response is not None
    await login_at_issuer(browser_page, mallory, issuer=env.iss)
    assert await browser_page.locator("#connect-form").count() == 0
    assert "belongs to another account" in await browser_page.inner_text("main")
    await save_screenshot(browser_page, "connect-refused-page")
    # Even a hand-made POST with Mallory's own session cannot start the authorization.
    cookies = {c["name"]: c["value"] for c in await browser_page.context.cookies()}
    async with httpx.AsyncClient(base_url=env.app.url, cookies=cookies) as http:
        posted = await http.post(f"/connect/{flow['id']}/continue", data={"csrf_token": "x" * 43})
    assert posted.status_code == 403
    assert "location" not in posted.headers
    await assert_nothing_happened(env, victim, flow["id"], calls)
    async with env.app.state.sessions() as session:
        states = (
            await session.execute(
                text("SELECT count(*) FROM oauth_states WHERE 'fl_' || replace(flow_id::text, '-', '') = :f"),
                {"f": flow["id"]},
            )
        ).scalar_one()
    assert states == 0
    assert "subject_mismatch" in [e["type"] for e in await flow_events(env.app, flow["id"])]


async def test_state_missing_or_wrong(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("sam")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    for url in (tampered(back, state=None), tampered(back, state="A" * 43), tampered(back, state="")):
        response = await browser_page.goto(url)
        assert response is not None and response.status == 400
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert await browser_page.inner_text("#problem") == "This sign-in response is not valid"
    await assert_nothing_happened(env, sub, flow["id"], calls)


async def test_state_replayed(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("rita")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    # First use is refused for another reason (a mix-up), which still uses the state up...
    first = await browser_page.goto(tampered(back, iss="https://evil.example"))
    assert first is not None and first.status == 400
    # ...so the genuine response, replayed, is refused without reaching the token endpoint.
    replay = await browser_page.goto(str(back))
    assert replay is not None and replay.status == 400
    assert await browser_page.inner_text("#problem") == "This sign-in response was already used"
    await assert_nothing_happened(env, sub, flow["id"], calls)


async def test_replay_after_success_makes_no_second_exchange(
    env: Env, client: ServerClientHandle, browser_page: Page
) -> None:
    sub = new_sub("ron")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    ok = await browser_page.goto(str(back))
    assert ok is not None and ok.status == 200
    assert await browser_page.inner_text("#outcome") == "Connected"
    stored = await connection_rows(env.app, sub)
    again = await browser_page.goto(str(back))
    assert again is not None and again.status == 400
    assert provider_token_calls(env.oauth) == calls + 1
    assert await connection_rows(env.app, sub) == stored


async def test_state_from_another_browser_session(
    env: Env, client: ServerClientHandle, browser_page: Page, chromium_browser: Browser
) -> None:
    sub = new_sub("bea")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    other = await new_context(chromium_browser)
    try:
        page = await other.new_page()
        await goto_connect(page, env, flow["url"], sub)  # same person, but another browser session
        response = await page.goto(str(back))
        assert response is not None and response.status == 400
        assert await page.inner_text("#problem") == "This sign-in response was already used"
    finally:
        await other.close()
    await assert_nothing_happened(env, sub, flow["id"], calls)
    # The attempt did not burn the state: the browser that started it still finishes.
    finished = await browser_page.goto(str(back))
    assert finished is not None and finished.status == 200
    assert await browser_page.inner_text("#outcome") == "Connected"
    assert provider_token_calls(env.oauth) == calls + 1


# "{issuer}/" is the provider's own issuer with a slash added: RFC 9207 compares exactly.
@pytest.mark.parametrize("iss", [None, "https://evil.example", "http://127.0.0.1:1", "{issuer}/"])
async def test_iss_missing_or_wrong(env: Env, client: ServerClientHandle, browser_page: Page, iss: str | None) -> None:
    sub = new_sub("ivy")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    if iss is not None:
        iss = iss.format(issuer=back.params["iss"])
    calls = provider_token_calls(env.oauth)
    response = await browser_page.goto(tampered(back, iss=iss))
    assert response is not None and response.status == 400
    assert await browser_page.inner_text("#problem") == "The response did not come from the expected provider"
    await assert_nothing_happened(env, sub, flow["id"], calls)
    reasons = [
        e["detail"].get("reason") for e in await flow_events(env.app, flow["id"]) if e["type"] == "callback_rejected"
    ]
    assert reasons == ["iss_missing" if iss is None else "iss_mismatch"]


async def test_callback_for_a_terminal_flow(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("tom")
    created = await create_flow(env, client, sub)
    flow = created["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    async with env.app.http(client.api_key) as http:
        declined = await http.post(
            "/v1/flows/resolve",
            json={
                "subject": {"iss": env.iss, "sub": sub},
                "request_state": created["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow['id']}": {"action": "decline"}},
            },
        )
    assert declined.json()["outcome"] == "declined"
    response = await browser_page.goto(str(back))
    assert response is not None and response.status == 200
    assert await browser_page.inner_text("#outcome") == "Not connected"
    assert provider_token_calls(env.oauth) == calls
    assert await connection_rows(env.app, sub) == []
    assert (await flow_row(env.app, flow["id"]))["status"] == "declined"


async def test_callback_for_an_expired_flow(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("eve")
    flow = (await create_flow(env, client, sub))["flow"]
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "UPDATE flows SET expires_at = now() - interval '1 second' "
                "WHERE 'fl_' || replace(id::text, '-', '') = :f"
            ),
            {"f": flow["id"]},
        )
        await session.commit()
    response = await browser_page.goto(str(back))
    assert response is not None
    assert await browser_page.inner_text("#outcome") == "This link has expired"
    assert provider_token_calls(env.oauth) == calls
    assert await connection_rows(env.app, sub) == []
    assert (await flow_row(env.app, flow["id"]))["status"] == "expired"


async def test_open_redirect_attempts(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    sub = new_sub("otto")
    flow = (await create_flow(env, client, sub))["flow"]
    await goto_connect(browser_page, env, flow["url"], sub)
    csrf = await browser_page.locator("input[name=csrf_token]").get_attribute("value")
    cookies = {c["name"]: c["value"] for c in await browser_page.context.cookies()}
    # A forged Host header is refused before any route (service.hosts), and extra return
    # parameters cannot move the redirect URI anywhere.
    async with httpx.AsyncClient(base_url=env.app.url, cookies=cookies) as http:
        forged = await http.post(
            f"/connect/{flow['id']}/continue",
            data={"csrf_token": csrf},
            headers={"Host": "evil.example"},
        )
        posted = await http.post(
            f"/connect/{flow['id']}/continue?next=https://evil.example/",
            data={"csrf_token": csrf, "redirect_uri": "https://evil.example/cb"},
        )
    assert (forged.status_code, forged.json()["code"]) == (421, "misdirected_request")
    assert posted.status_code == 303
    location = httpx.URL(posted.headers["location"])
    assert str(location).startswith(env.oauth.url("/authorize"))
    assert location.params["redirect_uri"] == env.app.url + "/connect/callback"
    back = await genuine_callback(browser_page, env, flow["url"], sub)
    calls = provider_token_calls(env.oauth)
    response = await browser_page.goto(
        tampered(back, next="https://evil.example/", return_to="//evil.example", redirect_uri="https://evil.example/")
    )
    assert response is not None and response.status == 200
    assert browser_page.url == f"{env.app.url}/connect/done/{flow['id']}"
    assert provider_token_calls(env.oauth) == calls + 1
