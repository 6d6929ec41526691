"""Sessions: cookie attributes under TLS, CSRF, log out / switch account, untrusted and disabled issuers."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.db.base import FLOW_ID
from service.identity.issuers import set_enabled
from service.settings import Settings
from tests.identity.conftest import (
    events,
    make_flow,
    new_sub,
    register_issuer,
    test_action,
    with_test_page,
)
from tests.support.apps import RunningApp, ServerClientHandle, free_port, new_server_client, running_app
from tests.support.browser import is_login_page, login_at_issuer, save_screenshot
from tests.support.oauth_server import OAuthServer, OAuthServerFactory

pytestmark = pytest.mark.browser


def _set_cookie(response: httpx.Response, name: str) -> str:
    found = [h for h in response.headers.get_list("set-cookie") if h.startswith(name + "=")]
    assert len(found) == 1, response.headers.get_list("set-cookie")
    return found[0]


async def test_cookies_under_tls_are_host_prefixed_and_secure(
    make_settings: Callable[..., Settings], issuer_server: OAuthServer
) -> None:
    port = free_port()
    public = f"https://127.0.0.1:{port}"
    async with running_app(
        make_settings(public_url=public), port, keep_public_url=True, customize=with_test_page, routes=[test_action]
    ) as app:
        await register_issuer(app, issuer_server)
        client = await new_server_client(app)
        alice = new_sub("alice")
        flow = await make_flow(app, client, iss=issuer_server.issuer, sub=alice)
        async with app.http() as http:
            start = await http.get(f"/f/{FLOW_ID.format(flow.id)}")
            assert start.status_code == 303
            login_cookie = _set_cookie(start, "__Host-elicitd_login")
            for attribute in ("HttpOnly", "Secure", "Path=/", "SameSite=lax"):
                assert attribute.lower() in login_cookie.lower()
            assert "domain=" not in login_cookie.lower()
            back = issuer_server.login_without_browser(start.headers["location"], alice)
            assert str(back).startswith(f"{public}/auth/callback?")
            binding = login_cookie.split(";", 1)[0]
            done = await http.get(str(back.copy_with(scheme="http")), headers={"Cookie": binding})
            assert done.status_code == 303
            assert done.headers["location"] == f"/f/{FLOW_ID.format(flow.id)}"
            assert done.headers["cache-control"] == "no-store"
            assert done.headers["referrer-policy"] == "no-referrer"
            session_cookie = _set_cookie(done, "__Host-elicitd_session")
            for attribute in ("HttpOnly", "Secure", "Path=/", "SameSite=lax", "Max-Age=28800"):
                assert attribute.lower() in session_cookie.lower()
            cleared = _set_cookie(done, "__Host-elicitd_login")
            assert "max-age=0" in cleared.lower()
            page = await http.get(f"/f/{FLOW_ID.format(flow.id)}", headers={"Cookie": session_cookie.split(";", 1)[0]})
            assert page.status_code == 200
            assert f"{issuer_server.issuer} {alice}" in page.text


async def test_csrf_logout_and_switch_account(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle, browser_page: Page
) -> None:
    alice, bob = new_sub("alice"), new_sub("bob")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    url = f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}"

    # Signed in as bob: refused; the page offers to sign out and switch.
    await browser_page.goto(url)
    await login_at_issuer(browser_page, bob, issuer=issuer_server.issuer)
    assert await browser_page.locator("h1").inner_text() == "This link belongs to another account"

    # A forged logout (wrong CSRF token) is refused and the session survives.
    await browser_page.locator("input[name=csrf_token]").evaluate("e => e.value = 'forged'")
    async with browser_page.expect_navigation():
        await browser_page.click("button[type=submit]")
    assert await browser_page.locator("h1").inner_text() == "This form has expired"
    await browser_page.goto(url)
    assert await browser_page.locator("h1").inner_text() == "This link belongs to another account"

    # The real one signs out and starts a fresh login (prompt=login) that comes back to the flow.
    issuer_server.reset_stats()
    async with browser_page.expect_navigation():
        await browser_page.click("button[type=submit]")
    assert await is_login_page(browser_page)
    assert httpx.URL(browser_page.url).params["prompt"] == "login"
    await login_at_issuer(browser_page, alice, issuer=issuer_server.issuer)
    assert browser_page.url == url
    assert await browser_page.locator("#who").inner_text() == f"{issuer_server.issuer} {alice}"

    # CSRF on a kind page's POST: a tampered token → 403 csrf_failed; the real one passes.
    await browser_page.locator("input[name=csrf_token]").evaluate("e => e.value = e.value.slice(0, -2) + 'xx'")
    async with browser_page.expect_navigation() as nav:
        await browser_page.click("#go")
    response = await nav.value
    assert response is not None and response.status == 403
    assert await browser_page.locator("h1").inner_text() == "This form has expired"
    await browser_page.goto(url)
    async with browser_page.expect_navigation() as nav:
        await browser_page.click("#go")
    response = await nav.value
    assert response is not None and response.status == 200
    assert await browser_page.locator("#done").inner_text() == "accepted"


async def test_flow_of_an_unregistered_issuer(
    identity_app: RunningApp, client: ServerClientHandle, browser_page: Page
) -> None:
    flow = await make_flow(identity_app, client, iss="https://unknown-idp.example", sub="u-1")
    response = await browser_page.goto(f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}")
    assert response is not None and response.status == 403
    assert await browser_page.locator("h1").inner_text() == "This sign-in service is not trusted here"
    await save_screenshot(browser_page, "identity-untrusted-issuer")
    # An anonymous visit writes nothing to the flow's history (tests/identity/test_anonymous_visits.py).
    assert [e["type"] for e in await events(identity_app, flow.id)] == ["created"]


async def test_disabling_an_issuer_ends_its_sessions(
    identity_app: RunningApp,
    client: ServerClientHandle,
    browser_page: Page,
    oauth_server_factory: OAuthServerFactory,
) -> None:
    other = oauth_server_factory()
    await register_issuer(identity_app, other, display_name="Other ID")
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=other.issuer, sub=alice)
    url = f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}"
    await browser_page.goto(url)
    await login_at_issuer(browser_page, alice, issuer=other.issuer)
    assert await browser_page.locator("#who").inner_text() == f"{other.issuer} {alice}"
    # Another browser has a sign-in under way at the same issuer.
    async with identity_app.http() as stranger:
        started = await stranger.get(f"/f/{FLOW_ID.format(flow.id)}")
    assert started.status_code == 303
    # Counted for alice: the issuer's URL is a local port, and an earlier test's server on the same
    # port left its own rows under this issuer.
    sessions, attempts = await rows_of(identity_app, other.issuer, sub=alice)
    assert sessions == 1
    assert attempts >= 1
    async with identity_app.state.sessions() as session:
        assert await set_enabled(session, other.issuer, False)
        await session.commit()
    assert await rows_of(identity_app, other.issuer) == (0, 0)  # deleted, not hidden
    response = await browser_page.goto(url)
    assert response is not None and response.status == 403
    assert await browser_page.locator("h1").inner_text() == "This sign-in service is not trusted here"
    # Enabled again, it brings no session back: the browser must sign in anew.
    async with identity_app.state.sessions() as session:
        assert await set_enabled(session, other.issuer, True)
        await session.commit()
    identity_app.state.issuers.forget()
    await browser_page.goto(url)
    assert await is_login_page(browser_page)


async def rows_of(app: RunningApp, issuer: str, *, sub: str | None = None) -> tuple[int, int]:
    """(browser sessions, login attempts) at ``issuer``; sessions only of ``sub`` when given."""
    async with app.state.sessions() as session:
        found = await session.execute(
            text(
                "SELECT (SELECT count(*) FROM browser_sessions b JOIN issuers i ON i.id = b.issuer_id "
                "WHERE i.issuer = :i AND (CAST(:s AS text) IS NULL OR b.sub = :s)), "
                "(SELECT count(*) FROM login_attempts a JOIN issuers i ON i.id = a.issuer_id WHERE i.issuer = :i)"
            ),
            {"i": issuer, "s": sub},
        )
        sessions, attempts = found.one()
    return int(sessions), int(attempts)
