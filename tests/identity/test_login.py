"""End-to-end: a real Chromium logs in at a real OIDC issuer before any kind page shows."""

from __future__ import annotations

import pytest
from playwright.async_api import Page

from service.db.base import FLOW_ID
from tests.identity.conftest import events, make_flow, new_sub, sessions_for
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.browser import is_login_page, login_at_issuer, save_screenshot
from tests.support.oauth_server import OAuthServer

pytestmark = pytest.mark.browser


async def test_subject_logs_in_and_passes(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle, browser_page: Page
) -> None:
    issuer_server.reset_stats()
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    url = f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}"

    await browser_page.goto(url)
    assert await is_login_page(browser_page)
    await login_at_issuer(browser_page, alice, issuer=issuer_server.issuer)

    assert browser_page.url == url
    assert await browser_page.locator("#who").inner_text() == f"{issuer_server.issuer} {alice}"
    assert issuer_server.token_calls("authorization_code") == 1

    cookies = {c["name"]: c for c in await browser_page.context.cookies(identity_app.url)}
    session = cookies["elicitd_session"]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Lax"
    assert session["path"] == "/"
    assert session["secure"] is False  # plain http on loopback; TLS is covered in test_cookies
    assert "elicitd_login" not in cookies  # the pre-login binding is cleared after use

    # A second visit needs no new login.
    await browser_page.goto(url)
    assert await browser_page.locator("#who").inner_text() == f"{issuer_server.issuer} {alice}"
    assert issuer_server.stats().authorize_calls == 1
    visits = [e for e in await events(identity_app, flow.id) if e["type"] == "browser_visit"]
    assert len(visits) == 2
    assert visits[0]["actor"] == "browser"
    assert visits[0]["detail"] == {"iss": issuer_server.issuer, "method": "GET"}
    assert await sessions_for(identity_app, issuer_server.issuer) >= 1


async def test_another_account_is_refused(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle, browser_page: Page
) -> None:
    alice, mallory = new_sub("alice"), new_sub("mallory")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    url = f"{identity_app.url}/f/{FLOW_ID.format(flow.id)}"

    await browser_page.goto(url)
    await login_at_issuer(browser_page, mallory, issuer=issuer_server.issuer)
    response = await browser_page.reload()
    assert response is not None
    assert response.status == 403
    assert await browser_page.locator("h1").inner_text() == "This link belongs to another account"
    body = await browser_page.locator("main").inner_text()
    assert identity_app.url in body or identity_app.settings.public_origin in body
    assert alice not in await browser_page.content()
    await save_screenshot(browser_page, "identity-refused")

    trail = await events(identity_app, flow.id)
    mismatches = [e for e in trail if e["type"] == "subject_mismatch"]
    assert len(mismatches) == 2  # the redirect back after login, and the reload
    import hashlib

    assert mismatches[0]["detail"]["sub_sha256"] == hashlib.sha256(mallory.encode()).hexdigest()
    assert mallory not in str(trail)
    assert [e["type"] for e in trail if e["type"] not in {"subject_mismatch"}] == ["created"]
    current = await identity_app.state.flows.read(flow.id)
    assert current is not None
    assert current.status == "pending"
    assert current.updated_at == flow.updated_at
