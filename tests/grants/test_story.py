"""Who may use a connection, as a person and two MCP servers live it — on real parts: headless
Chromium, a real issuer and a real provider (two OAuth server processes), two elicitd replicas on
one database.

alice connects her Acme account through server client A ("Acme Files Assistant"). Server client B
("Other Server") then asks for the same account: the token endpoint answers B exactly as if nobody
had connected; B's flow page asks alice "Other Server asks to use your Acme account" without
sending her to Acme; after *Allow*, B gets the token; after alice revokes B on her own page
(``/me``), B's very next token request is refused on both replicas, while A keeps its access.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.async_api import Page

from tests.grants.conftest import (
    Story,
    authorize_calls,
    connect_in_browser,
    create_connect_flow,
    document_screenshot,
    flow_events,
    new_sub,
    sign_in_if_asked,
    token,
)
from tests.support.apps import new_server_client

pytestmark = pytest.mark.browser


async def test_another_server_asks_alice_allows_then_revokes(story: Story, browser_page: Page) -> None:
    page = browser_page
    a = await new_server_client(story.app, display_name="Acme Files Assistant")
    b = await new_server_client(story.app, display_name="Other Server")
    alice, account = new_sub("alice"), "alice@acme"

    # -- alice connects Acme through A: the connect page names A, and only A --------------------------
    created = await create_connect_flow(story, a, alice, scopes=["files:read"])
    await page.goto(created["flow"]["url"])
    await sign_in_if_asked(page, story, alice)
    await page.locator("#connect-form").wait_for()
    assert await page.inner_text("#grantee") == "Acme Files Assistant will be able to"
    await connect_in_browser(page, story, created["flow"]["url"], alice, account)
    assert await page.inner_text("#outcome") == "Connected"
    a_token = await token(story, a, alice)
    assert a_token.status_code == 200, a_token.text
    connection = a_token.json()["connection_id"]
    assert a_token.headers["cache-control"] == "no-store"

    # -- B, never granted: 404 not_connected, byte for byte what a never-connected user gets ---------
    nobody = new_sub("nobody")
    for replica in (story.app, story.replica):
        refused, absent = await token(story, b, alice, app=replica), await token(story, b, nobody, app=replica)
        assert (refused.status_code, refused.json()["code"]) == (404, "not_connected")
        assert refused.content == absent.content
        assert refused.headers["content-type"] == absent.headers["content-type"]

    # -- B asks through a flow: pending, shaped exactly like a first connect ------------------------
    asked = await create_connect_flow(story, b, alice, scopes=["files:read"])
    fresh = await create_connect_flow(story, b, nobody, scopes=["files:read"])
    assert asked["status"] == fresh["status"] == "pending"
    assert asked["flow"]["scopes"] == fresh["flow"]["scopes"] == ["files:read"]
    assert asked["mcp"]["inputRequests"].keys() != fresh["mcp"]["inputRequests"].keys()  # two flows
    assert set(asked) == set(fresh) and set(asked["flow"]) == set(fresh["flow"])

    # -- alice opens B's link: the grant page, and Acme is not visited ------------------------------
    acme_authorizations = authorize_calls(story.acme)
    await page.goto(asked["flow"]["url"])
    await page.locator("#grant-form").wait_for()
    heading = await page.inner_text("#grant-title")
    assert heading == f"Other Server asks to use your Acme account ({account})"
    assert await page.inner_text("#grantee") == "Other Server will be able to"
    assert await page.inner_text("#scopes") == "Files: read files:read"
    main = await page.inner_text("main")
    assert "Acme is not asked again" in main and story.app.url in main
    assert await page.locator("script").count() == 0
    await document_screenshot(page, "6-grant-page")
    async with page.expect_navigation():
        await page.click("#allow")
    assert await page.inner_text("#outcome") == "Allowed"
    assert authorize_calls(story.acme) == acme_authorizations  # no round trip to the provider
    assert "provider_redirect" not in await flow_events(story.app, asked["flow"]["id"])

    # -- B's flow completed with A's connection, in a connect's shape; B now gets the token ----------
    async with story.app.http(b.api_key) as http:
        status = (await http.get(f"/v1/flows/{asked['flow']['id']}")).json()
    assert status["flow"]["status"] == "completed"
    assert status["result"] == {
        "connection_id": connection,
        "provider": story.provider,
        "account_id": story.acme.account_id(account),
        "account_login": account,
        "scopes": ["files:read"],
    }
    for replica in (story.app, story.replica):
        granted = await token(story, b, alice, app=replica)
        assert granted.status_code == 200, granted.text
        assert granted.json()["access_token"] == a_token.json()["access_token"]
        assert granted.json()["connection_id"] == connection
        assert granted.headers["cache-control"] == "no-store"
    again = await create_connect_flow(story, b, alice, scopes=["files:read"], expect=200)
    assert (again["status"], again["result"]["connection_id"]) == ("completed", connection)

    # -- alice's own page: the account, who may use it, Revoke access --------------------------------
    await page.goto(f"{story.app.url}/me?iss={quote(story.iss, safe='')}")
    section = page.locator(f"#connection-{connection}")
    await section.wait_for()
    assert await page.inner_text("#me-subject") == alice
    grantees = await section.locator(".grant .grantee").all_inner_texts()
    assert grantees == ["Acme Files Assistant", "Other Server"]
    section_text = await section.inner_text()
    assert f"Acme — {account}" in section_text and "Files: read" in section_text
    await document_screenshot(page, "7-me-page")
    b_grant = section.locator(".grant", has_text="Other Server")
    async with page.expect_navigation():
        await b_grant.locator("button.revoke").click()
    assert await page.locator(f"#connection-{connection} .grant .grantee").all_inner_texts() == ["Acme Files Assistant"]

    # -- the very next request on either replica: B is refused, A is not -----------------------------
    for replica in (story.replica, story.app):
        after = await token(story, b, alice, app=replica)
        assert (after.status_code, after.content) == (404, (await token(story, b, nobody, app=replica)).content)
        assert (await token(story, a, alice, app=replica)).status_code == 200
