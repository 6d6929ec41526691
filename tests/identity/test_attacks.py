"""Attacks on the login: each must fail before the code is redeemed and store no session."""

from __future__ import annotations

import secrets

import httpx
import pytest
from playwright.async_api import BrowserContext, Page, Route

from service.db.base import FLOW_ID
from service.identity.issuers import ResolvedIssuer
from service.identity.oidc import InvalidIdToken, verify_id_token
from tests.identity.conftest import make_flow, new_sub, sessions_for
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.browser import login_at_issuer, new_context
from tests.support.oauth_server import OAuthServer, OAuthServerFactory

pytestmark = pytest.mark.browser


async def _capture_callback(page: Page, url: str, username: str, issuer: str) -> str:
    """Log in but stop the browser before it delivers the callback; return the callback URL."""
    captured: list[str] = []

    async def hold(route: Route) -> None:
        # Redirects are not routable in Chromium: take the login POST's answer and keep its Location.
        response = await route.fetch(max_redirects=0)
        captured.append(response.headers["location"])
        await route.fulfill(status=200, body="held", content_type="text/plain")

    def is_login_post(url: str) -> bool:
        return url.startswith(issuer) and httpx.URL(url).path == "/login"

    await page.route(is_login_post, hold)
    await page.goto(url)
    await page.locator("form#login").wait_for()
    await page.fill("#username", username)
    async with page.expect_navigation():
        await page.click("#approve")
    await page.unroute(is_login_post)
    assert captured, "the issuer never redirected back"
    return captured[0]


async def _assert_refused(page: Page, url: str, code_title: str) -> None:
    response = await page.goto(url)
    assert response is not None
    assert response.status == 400
    assert await page.locator("h1").inner_text() == code_title
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"


async def test_state_missing_or_wrong(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle, browser_page: Page
) -> None:
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    callback = await _capture_callback(
        browser_page, f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}", alice, issuer_server.issuer
    )
    issuer_server.reset_stats()
    before = await sessions_for(identity_app, issuer_server.issuer)
    url = httpx.URL(callback)
    without_state = str(url.copy_remove_param("state"))
    wrong_state = str(url.copy_set_param("state", secrets.token_urlsafe(32)))
    await _assert_refused(browser_page, without_state, "This sign-in link is not valid")
    await _assert_refused(browser_page, wrong_state, "This sign-in link is not valid")
    assert issuer_server.token_calls("authorization_code") == 0
    assert await sessions_for(identity_app, issuer_server.issuer) == before
    assert "elicitd_session" not in {c["name"] for c in await browser_page.context.cookies()}


async def test_state_replayed(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle, browser_page: Page
) -> None:
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    callback = await _capture_callback(
        browser_page, f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}", alice, issuer_server.issuer
    )
    issuer_server.reset_stats()
    await browser_page.goto(callback)
    assert await browser_page.locator("#who").inner_text() == f"{issuer_server.issuer} {alice}"
    sessions = await sessions_for(identity_app, issuer_server.issuer)
    await _assert_refused(browser_page, callback, "This sign-in link is not valid")
    assert issuer_server.token_calls("authorization_code") == 1
    assert await sessions_for(identity_app, issuer_server.issuer) == sessions


async def test_state_from_another_browser(
    identity_app: RunningApp,
    issuer_server: OAuthServer,
    client: ServerClientHandle,
    browser_page: Page,
    browser_context: BrowserContext,
) -> None:
    """A callback forwarded to (or forced on) another browser fails there and stays usable by its owner."""
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    flow_url = f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}"
    callback = await _capture_callback(browser_page, flow_url, alice, issuer_server.issuer)
    issuer_server.reset_stats()
    browser = browser_context.browser
    assert browser is not None
    other = await new_context(browser)
    try:
        victim = await other.new_page()
        await _assert_refused(victim, callback, "This sign-in link is not valid")
        # Even with a pre-login cookie of its own (it started a login too), the other browser fails.
        await victim.goto(flow_url)
        await _assert_refused(victim, callback, "This sign-in link is not valid")
        assert "elicitd_session" not in {c["name"] for c in await other.cookies()}
    finally:
        await other.close()
    assert issuer_server.token_calls("authorization_code") == 0
    # The state was not burned by the failed attempts: its own browser still completes.
    await browser_page.goto(callback)
    assert await browser_page.locator("#who").inner_text() == f"{issuer_server.issuer} {alice}"


@pytest.mark.parametrize("returned_iss", ["https://evil.example", None])
async def test_wrong_or_missing_iss_is_rejected_before_code_exchange(
    identity_app: RunningApp,
    issuer_server: OAuthServer,
    client: ServerClientHandle,
    browser_page: Page,
    returned_iss: str | None,
) -> None:
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    issuer_server.configure(authorization_response_iss=returned_iss)
    try:
        issuer_server.reset_stats()
        before = await sessions_for(identity_app, issuer_server.issuer)
        await browser_page.goto(f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}")
        await login_at_issuer(browser_page, alice, issuer=issuer_server.issuer)
        assert browser_page.url.startswith(f"{identity_app.url}/auth/callback")
        assert await browser_page.locator("h1").inner_text() == "Sign-in answered by the wrong service"
        assert issuer_server.token_calls("authorization_code") == 0
        assert await sessions_for(identity_app, issuer_server.issuer) == before
    finally:
        issuer_server.configure(authorization_response_iss=issuer_server.issuer)


@pytest.mark.parametrize(
    "return_to",
    [
        "https://evil.example/f/fl_" + "0" * 32,
        "//evil.example/f/fl_" + "0" * 32,
        "/\\evil.example",
        "https:evil.example",
        "/f/fl_" + "0" * 32 + "/../../x",
        "",
        "/auth/logout",
    ],
)
async def test_open_redirect_is_refused(identity_app: RunningApp, return_to: str) -> None:
    async with identity_app.http() as http:
        response = await http.get("/auth/login", params={"return_to": return_to})
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "text/html" in response.headers["content-type"]


async def test_login_for_a_flow_page_redirects_to_its_issuer(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("alice"))
    async with identity_app.http() as http:
        response = await http.get(
            "/auth/login", params={"return_to": f"/f/{FLOW_ID.format(flow.id)}", "switch": "true"}
        )
    assert response.status_code == 303
    location = httpx.URL(response.headers["location"])
    assert str(location).startswith(issuer_server.authorization_endpoint)
    params = location.params
    assert params["code_challenge_method"] == "S256"
    assert params["prompt"] == "login"
    assert params["redirect_uri"] == f"{identity_app.url}/auth/callback"
    assert len(params["state"]) >= 43 and len(params["nonce"]) >= 43


async def _resolved(identity_app: RunningApp, issuer_server: OAuthServer) -> ResolvedIssuer:
    resolved: ResolvedIssuer | None = await identity_app.state.issuers.resolve(issuer_server.issuer)
    assert resolved is not None
    return resolved


@pytest.mark.parametrize(
    ("client_id", "nonce", "ok"),
    [
        ("elicitd-test", "n-expected", True),
        ("elicitd-test", "n-other", False),
        ("another-client", "n-expected", False),
    ],
)
async def test_id_token_nonce_and_audience(
    identity_app: RunningApp, issuer_server: OAuthServer, client_id: str, nonce: str, ok: bool
) -> None:
    minted = issuer_server.mint("alice", client_id=client_id, nonce=nonce)
    issuer = await _resolved(identity_app, issuer_server)
    if ok:
        verified = await verify_id_token(identity_app.state.issuers, issuer, minted["id_token"], nonce="n-expected")
        assert (verified.iss, verified.sub) == (issuer_server.issuer, "alice")
    else:
        with pytest.raises(InvalidIdToken):
            await verify_id_token(identity_app.state.issuers, issuer, minted["id_token"], nonce="n-expected")


async def test_id_token_from_another_issuer_is_rejected(
    identity_app: RunningApp, issuer_server: OAuthServer, oauth_server_factory: OAuthServerFactory
) -> None:
    stranger = oauth_server_factory()
    minted = stranger.mint("alice", client_id="elicitd-test", nonce="n")
    issuer = await _resolved(identity_app, issuer_server)
    with pytest.raises(InvalidIdToken):
        await verify_id_token(identity_app.state.issuers, issuer, minted["id_token"], nonce="n")
    forged = minted["id_token"].rsplit(".", 1)[0] + ".AAAA"
    with pytest.raises(InvalidIdToken):
        await verify_id_token(identity_app.state.issuers, issuer, forged, nonce="n")
