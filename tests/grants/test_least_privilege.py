"""No server gets more than the user granted it — on real parts: headless Chromium, a real issuer
and a real provider (two OAuth server processes) issuing tokens that carry their scopes, two
server clients and two elicitd replicas on one database.

A connects alice's Acme account for ``files:read files:write``. B asks for ``files:read``. The
grant page says A already holds both, and offers *Connect separately* first: a provider trip for a
second authorization with just ``files:read``, which the provider reports as carrying only that,
and which B's token endpoint and the RFC 8693 exchange answer (on both replicas) while A keeps its own. *Share the wider
access* records the wider scopes on B's grant, as the page said. A second authorization for
another provider account is refused; B ending its grant hands its own token back at the provider.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.db.base import CONNECTION_ID
from tests.grants.conftest import (
    Story,
    connect_in_browser,
    create_connect_flow,
    document_screenshot,
    new_sub,
    plant,
    sign_in_if_asked,
    token,
)
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.browser import login_at_issuer
from tests.support.factories import grant_connection, store_connection, token_set
from tests.support.providers import register_provider

pytestmark = pytest.mark.browser

RESOURCE = "https://files.example.com/mcp"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"

BOTH = ["files:read", "files:write"]


async def _a_connects_both(story: Story, page: Page, alice: str, account: str) -> tuple[ServerClientHandle, str]:
    a = await new_server_client(story.app, display_name="Acme Files Assistant")
    created = await create_connect_flow(story, a, alice, scopes=BOTH)
    await connect_in_browser(page, story, created["flow"]["url"], alice, account)
    served = await token(story, a, alice)
    assert served.status_code == 200, served.text
    assert story.acme.token(served.json()["access_token"]).scope.split() == BOTH
    return a, served.json()["access_token"]


async def exchange(
    story: Story, client: ServerClientHandle, sub: str, *, app: RunningApp, scope: str | None = None
) -> httpx.Response:
    """``POST /oauth/token`` (RFC 8693) with ``sub``'s MCP access token, as ``client`` would."""
    minted = story.id_server.mint(sub, client_id="files-mcp-client", scope="files", audience=RESOURCE, format="jwt")
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": str(minted["access_token"]),
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": story.provider,
    }
    if scope is not None:
        form["scope"] = scope
    async with httpx.AsyncClient(base_url=app.url, auth=(client.name, client.api_key), timeout=30) as http:
        return await http.post("/oauth/token", data=form)


async def _open_grant_page(story: Story, page: Page, flow_url: str, alice: str) -> None:
    await page.goto(flow_url)
    await sign_in_if_asked(page, story, alice)
    await page.locator("#wider").wait_for()


async def test_connect_separately_gives_b_a_token_with_just_what_it_asked(story: Story, browser_page: Page) -> None:
    page = browser_page
    alice, account = new_sub("alice"), "alice@acme"
    a, a_token = await _a_connects_both(story, page, alice, account)
    # B serves its MCP tool at RESOURCE and may also trade its users' tokens (RFC 8693).
    b = await new_server_client(
        story.app, display_name="Other Server", resource_uris=[RESOURCE], trusted_issuers=[story.iss]
    )
    asked = await create_connect_flow(story, b, alice, scopes=["files:read"])
    assert asked["status"] == "pending"
    await _open_grant_page(story, page, asked["flow"]["url"], alice)
    # The page says in full who holds what, and offers the separate authorization first.
    assert await page.inner_text("#holders") == "Acme Files Assistant already has this access to your Acme account:"
    assert await page.inner_text("#held-scopes") == "Files: read files:read\nFiles: change and delete files:write"
    assert await page.inner_text("#scopes") == "Files: read files:read"
    assert await page.inner_text("#separate") == "Connect separately with just files:read"
    assert await page.locator("#allow").count() == 0  # no plain Allow of the wider access
    buttons = await page.locator("button").all_inner_texts()
    assert buttons == ["Connect separately with just files:read", "Share the wider access", "Decline"]
    await document_screenshot(page, "7-grant-page-wider")
    async with page.expect_navigation():
        await page.click("#separate")
    await login_at_issuer(page, account, issuer=story.acme.issuer)
    await page.locator("#outcome").wait_for()
    assert await page.inner_text("#outcome") == "Connected"
    await document_screenshot(page, "8-connected-separately")

    for replica in (story.app, story.replica):
        b_served = await token(story, b, alice, app=replica)
        assert b_served.status_code == 200, b_served.text
        assert b_served.json()["scopes"] == ["files:read"]
        assert b_served.json()["access_token"] != a_token
        # The provider itself says what B's token carries.
        assert story.acme.token(b_served.json()["access_token"]).scope == "files:read"
        a_served = await token(story, a, alice, app=replica)
        assert (a_served.json()["access_token"], a_served.json()["scopes"]) == (a_token, BOTH)
        # The exchange answers B's own authorization too, with its real scope.
        traded = await exchange(story, b, alice, app=replica)
        assert traded.status_code == 200, traded.text
        assert (traded.json()["access_token"], traded.json()["scope"]) == (
            b_served.json()["access_token"],
            "files:read",
        )
        wider_trade = await exchange(story, b, alice, app=replica, scope="files:read files:write")
        assert (wider_trade.status_code, wider_trade.json()["error"]) == (400, "invalid_scope")
        assert "access_token" not in wider_trade.json()
    assert b_served.json()["connection_id"] == a_served.json()["connection_id"]  # one account, one connection
    async with story.app.http(b.api_key) as http:
        wider = await http.get(
            f"/v1/connections/{story.provider}/token",
            params={"iss": story.iss, "sub": alice, "scopes": "files:write"},
        )
    assert (wider.status_code, wider.json()["code"], wider.json()["missing"]) == (
        409,
        "insufficient_scope",
        ["files:write"],
    )

    # B ends its own grant: its authorization is handed back at the provider, A's stays live.
    b_token = b_served.json()["access_token"]
    async with story.app.http(b.api_key) as http:
        ended = await http.delete(f"/v1/connections/{story.provider}", params={"iss": story.iss, "sub": alice})
    assert (ended.status_code, ended.json()["revoked"], ended.json()["revoked_at_provider"]) == (200, [], True)
    assert story.acme.token(b_token).status == "revoked"
    assert story.acme.token(a_token).status == "active"
    assert (await token(story, b, alice)).status_code == 404
    assert (await token(story, a, alice)).json()["access_token"] == a_token


async def test_share_the_wider_access_is_recorded_on_the_grant(story: Story, browser_page: Page) -> None:
    page = browser_page
    alice, account = new_sub("alice"), "alice@acme"
    _, a_token = await _a_connects_both(story, page, alice, account)
    b = await new_server_client(story.app, display_name="Other Server")
    asked = await create_connect_flow(story, b, alice, scopes=["files:read"])
    await _open_grant_page(story, page, asked["flow"]["url"], alice)
    said = await page.inner_text("#wider")
    assert "Other Server would also be able to Files: change and delete files:write" in said
    authorizations = story.acme.stats().authorize_calls
    async with page.expect_navigation():
        await page.click("#share-wider")
    assert await page.inner_text("#outcome") == "Allowed"
    assert story.acme.stats().authorize_calls == authorizations  # no provider trip
    served = await token(story, b, alice)
    assert (served.json()["access_token"], served.json()["scopes"]) == (a_token, BOTH)
    async with story.app.state.sessions() as session:
        recorded = (
            await session.execute(
                text("SELECT scopes FROM grants WHERE server_client_id = :b AND revoked_at IS NULL"), {"b": b.id}
            )
        ).scalar_one()
    assert recorded == BOTH


async def test_a_separate_authorization_for_another_account_is_refused(story: Story, browser_page: Page) -> None:
    page = browser_page
    alice, account = new_sub("alice"), "alice@acme"
    await _a_connects_both(story, page, alice, account)
    b = await new_server_client(story.app, display_name="Other Server")
    asked = await create_connect_flow(story, b, alice, scopes=["files:read"])
    await _open_grant_page(story, page, asked["flow"]["url"], alice)
    revocations = len(story.acme.revocations())
    async with page.expect_navigation():
        await page.click("#separate")
    await login_at_issuer(page, "mallory@acme", issuer=story.acme.issuer)
    await page.locator("h1").wait_for()
    heading = await page.locator("h1").inner_text()
    assert heading == "You signed in to Acme as another account"
    await document_screenshot(page, "9-another-account-refused")
    assert (await token(story, b, alice)).status_code == 404
    async with story.app.http(b.api_key) as http:
        status = (await http.get(f"/v1/flows/{asked['flow']['id']}")).json()
    assert status["flow"]["status"] == "pending"
    assert len(story.acme.revocations()) == revocations + 1  # the tokens just issued were handed back
    async with story.app.state.sessions() as session:
        accounts = (
            await session.execute(
                text("SELECT DISTINCT account_id FROM authorizations WHERE subject_sub = :s"), {"s": alice}
            )
        ).scalars()
        assert list(accounts) == [story.acme.account_id(account)]


async def test_a_provider_without_default_scopes_tells_an_ungranted_server_nothing(story: Story) -> None:
    """An empty scope set is inside every set: B, never granted, must still not be told about A's
    connection (no ``completed`` with A's ids), and gets the grant page instead."""
    name = f"bare-{uuid.uuid4().hex[:6]}"
    await register_provider(
        story.app, story.acme, name, client_id="elicitd-acme", secret="acme-client-secret-for-tests", default_scopes=()
    )
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice = new_sub("alice")
    minted = story.acme.mint(f"{alice}@acme", client_id="elicitd-acme", scope="files:read")
    tokens = token_set(minted["access_token"], minted["refresh_token"], scope="", raw=minted)
    connection = await store_connection(
        story.app,
        name,
        tokens,
        iss=story.iss,
        sub=alice,
        account_id=story.acme.account_id(f"{alice}@acme"),
        account_login=f"{alice}@acme",
        requested=[],
    )
    await grant_connection(story.app, connection, a.id, [])
    body = {"subject": {"iss": story.iss, "sub": alice}, "kind": "oauth_connect", "provider": name}
    async with story.app.http(b.api_key) as http:
        asked = await http.post("/v1/flows", json=body)
    assert (asked.status_code, asked.json()["status"]) == (201, "pending")
    assert connection not in asked.text
    async with story.app.http(a.api_key) as http:
        own = await http.post("/v1/flows", json=body)
    assert (own.status_code, own.json()["status"], own.json()["result"]["connection_id"]) == (
        200,
        "completed",
        connection,
    )


async def test_a_grant_row_written_without_the_keys_opens_nothing(story: Story) -> None:
    """A database writer copies A's grant for B (``INSERT INTO grants``): the row's MAC does not
    check, so B is answered as if nothing were connected."""
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice = new_sub("alice")
    connection, _ = await plant(story, alice)
    await grant_connection(story.app, connection, a.id, ["files:read"])
    async with story.app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO grants (id, connection_id, authorization_id, server_client_id, scopes, origin, mac, "
                "mac_key_id) SELECT gen_random_uuid(), connection_id, authorization_id, :b, scopes, origin, mac, "
                "mac_key_id FROM grants WHERE server_client_id = :a AND connection_id = :c"
            ),
            {"a": a.id, "b": b.id, "c": CONNECTION_ID.parse(connection)},
        )
        await session.execute(
            text(
                "INSERT INTO grants (id, connection_id, authorization_id, server_client_id, scopes, origin) "
                "SELECT gen_random_uuid(), connection_id, authorization_id, :z, scopes, origin FROM grants "
                "WHERE server_client_id = :a AND connection_id = :c"
            ),
            {"a": a.id, "z": (z := await new_server_client(story.app)).id, "c": CONNECTION_ID.parse(connection)},
        )
        await session.commit()
    assert (await token(story, a, alice)).status_code == 200
    for forged in (b, z):
        refused = await token(story, forged, alice)
        assert (refused.status_code, refused.json()["code"]) == (404, "not_connected")
