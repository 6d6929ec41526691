"""The pages that grant and take back, in real Chromium: the connect page of a trust group, the grant
page's Decline and its fall-back when the account went away, the grant page of a stored API key,
and ``/me``'s sign-in and its refusals (another person's grant, a form without its CSRF token)."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.apikeys.providers import upsert_api_key_provider
from service.db.base import CONNECTION_ID
from service.grants.groups import create_group, remove_members
from tests.grants.conftest import (
    Story,
    connect_in_browser,
    create_connect_flow,
    document_screenshot,
    flow_events,
    new_sub,
    plant,
    sign_in_if_asked,
    token,
)
from tests.grants.test_grants import grant_to
from tests.support.apps import new_server_client

pytestmark = pytest.mark.browser


def me_url(story: Story) -> str:
    return f"{story.app.url}/me?iss={quote(story.iss, safe='')}"


async def grants_of(story: Story, connection: str) -> list[tuple[str | None, str | None, str | None]]:
    async with story.app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT sc.name, tg.name, g.revoked_by FROM grants g LEFT JOIN server_clients sc "
                "ON sc.id = g.server_client_id LEFT JOIN trust_groups tg ON tg.id = g.trust_group_id "
                "WHERE g.connection_id = :c ORDER BY g.created_at"
            ),
            {"c": CONNECTION_ID.parse(connection)},
        )
        return [(r[0], r[1], r[2]) for r in rows]


async def test_a_trust_groups_connect_page_names_every_member(story: Story, browser_page: Page) -> None:
    page = browser_page
    files = await new_server_client(story.app, display_name="Acme Files Assistant")
    mail = await new_server_client(story.app, display_name="Acme Mail")
    calendar = await new_server_client(story.app, display_name="Acme Calendar")
    group = f"example-{uuid.uuid4().hex[:6]}"
    async with story.app.state.sessions() as session:
        await create_group(session, group, "Example Corp", [files.name, mail.name, calendar.name], allow_unproven=True)
        await session.commit()
    alice = new_sub("alice")
    created = await create_connect_flow(story, files, alice, scopes=["files:read"])
    await page.goto(created["flow"]["url"])
    await sign_in_if_asked(page, story, alice)
    await page.locator("#connect-form").wait_for()
    assert await page.inner_text("#grantee") == (
        "Acme Files Assistant and 2 other services of Example Corp will be able to"
    )
    members = await page.inner_text("#members")
    assert members.startswith("The services of Example Corp: Acme Files Assistant, Acme Calendar, Acme Mail.")
    await document_screenshot(page, "8-connect-page-trust-group")
    await connect_in_browser(page, story, created["flow"]["url"], alice, f"{alice}@acme")
    connection = (await token(story, files, alice)).json()["connection_id"]
    assert await grants_of(story, connection) == [(None, group, None)]
    assert [(await token(story, c, alice)).status_code for c in (files, mail, calendar)] == [200, 200, 200]
    async with story.app.state.sessions() as session:
        await remove_members(session, group, [mail.name])
        await session.commit()
    assert (await token(story, mail, alice)).status_code == 404  # left the group: its grants with it
    assert (await token(story, mail, alice, app=story.replica)).status_code == 404


async def test_declining_the_grant_page_grants_nothing(story: Story, browser_page: Page) -> None:
    a, b = await new_server_client(story.app), await new_server_client(story.app, display_name="Other Server")
    alice = new_sub("alice")
    connection, _ = await plant(story, alice)
    await grant_to(story, connection, a, ["files:read"])
    asked = await create_connect_flow(story, b, alice)
    await browser_page.goto(asked["flow"]["url"])
    await sign_in_if_asked(browser_page, story, alice)
    await browser_page.locator("#grant-form").wait_for()
    async with browser_page.expect_navigation():
        await browser_page.click("#decline")
    assert await browser_page.inner_text("#outcome") == "Not allowed"
    async with story.app.http(b.api_key) as http:
        status = (await http.get(f"/v1/flows/{asked['flow']['id']}")).json()
    assert (status["flow"]["status"], status["flow"]["error"]["code"]) == ("declined", "declined")
    assert (await token(story, b, alice)).status_code == 404
    assert [g[0] for g in await grants_of(story, connection)] == [a.name]


async def test_allow_after_a_disconnect_falls_back_to_the_provider_step(story: Story, browser_page: Page) -> None:
    a, b = await new_server_client(story.app), await new_server_client(story.app, display_name="Other Server")
    alice = new_sub("alice")
    connection, _ = await plant(story, alice)
    await grant_to(story, connection, a, ["files:read"])
    asked = await create_connect_flow(story, b, alice)
    await browser_page.goto(asked["flow"]["url"])
    await sign_in_if_asked(browser_page, story, alice)
    await browser_page.locator("#grant-form").wait_for()
    async with story.app.http(a.api_key) as http:  # meanwhile, A disconnects the account
        gone = await http.delete(f"/v1/connections/{story.provider}", params={"iss": story.iss, "sub": alice})
    assert gone.status_code == 200
    async with browser_page.expect_navigation():
        await browser_page.click("#allow")
    await browser_page.locator("#connect-form").wait_for()  # the page now asks the usual way
    assert (await token(story, b, alice)).status_code == 404
    assert [g[0] for g in await grants_of(story, connection)] == [a.name]


async def test_a_stored_api_key_is_offered_not_asked_again(story: Story, browser_page: Page) -> None:
    page = browser_page
    provider = f"keys-{uuid.uuid4().hex[:6]}"
    async with story.app.state.sessions() as session:
        await upsert_api_key_provider(session, provider, "Acme API", {"key_label": "API key", "min_length": 20})
        await session.commit()
    a = await new_server_client(story.app, display_name="Acme Ops Assistant")
    b = await new_server_client(story.app, display_name="Other Server")
    alice, key = new_sub("alice"), f"acme-key-{uuid.uuid4().hex}"
    body = {"subject": {"iss": story.iss, "sub": alice}, "kind": "api_key", "provider": provider}
    async with story.app.http(a.api_key) as http:
        first = (await http.post("/v1/flows", json=body)).json()
    await page.goto(first["flow"]["url"])
    await sign_in_if_asked(page, story, alice)
    await page.fill("#secret", key)
    async with page.expect_navigation():
        await page.click("#save")

    async def key_token(client_key: str) -> httpx.Response:
        async with story.app.http(client_key) as http:
            return await http.get(f"/v1/connections/{provider}/token", params={"iss": story.iss, "sub": alice})

    assert (await key_token(a.api_key)).json()["access_token"] == key
    assert (await key_token(b.api_key)).status_code == 404
    async with story.app.http(b.api_key) as http:
        asked = await http.post("/v1/flows", json=body)
    assert asked.status_code == 201
    await page.goto(asked.json()["flow"]["url"])
    await page.locator("#grant-form").wait_for()
    assert await page.locator("#secret").count() == 0  # no form: the key is not typed again
    assert await page.inner_text("#grant-title") == "Other Server asks to use your Acme API account"
    assert "Use the Acme API API key you saved before" in await page.inner_text("#scopes")
    assert key not in await page.content()
    async with page.expect_navigation():
        await page.click("#allow")
    assert (await key_token(b.api_key)).json()["access_token"] == key
    assert "provider_redirect" not in await flow_events(story.app, asked.json()["flow"]["id"])


async def test_me_signs_in_at_the_named_issuer_and_comes_back(story: Story, browser_page: Page) -> None:
    page = browser_page
    alice = new_sub("alice")
    async with httpx.AsyncClient(base_url=story.app.url) as http:
        bare = await http.get("/me")
        unknown = await http.get("/me", params={"iss": "https://unknown.example"})
        signing = await http.get("/me", params={"iss": story.iss})
        via_login = await http.get("/auth/login", params={"return_to": f"/me?iss={story.iss}"})
        elsewhere = await http.get("/auth/login", params={"return_to": "/me?iss=https://unknown.example"})
    assert bare.status_code == 200 and "Sign in with Test ID" in bare.text
    assert via_login.status_code == 303 and via_login.headers["location"].startswith(story.iss)
    assert (elsewhere.status_code, elsewhere.headers["location"]) == (303, "/me?iss=https%3A%2F%2Funknown.example")
    assert bare.headers["cache-control"] == "no-store"
    assert unknown.status_code == 404
    assert signing.status_code == 303 and signing.headers["location"].startswith(story.iss)
    await page.goto(me_url(story))
    await sign_in_if_asked(page, story, alice)
    await page.locator("#me-title").wait_for()
    assert page.url == me_url(story)
    assert await page.inner_text("#me-subject") == alice
    assert await page.inner_text("#no-connections") == "You have no connected accounts."


async def test_me_acts_only_on_the_signed_in_persons_grants_with_its_csrf_token(
    story: Story, browser_page: Page
) -> None:
    page = browser_page
    a = await new_server_client(story.app, display_name="Acme Files Assistant")
    alice, bob = new_sub("alice"), new_sub("bob")
    alices, minted = await plant(story, alice)
    bobs, _ = await plant(story, bob)
    await grant_to(story, alices, a, ["files:read"])
    await grant_to(story, bobs, a, ["files:read"])
    async with story.app.state.sessions() as session:
        bob_grant = (
            await session.execute(
                text("SELECT id FROM grants WHERE connection_id = :c"), {"c": CONNECTION_ID.parse(bobs)}
            )
        ).scalar_one()
    await page.goto(me_url(story))
    await sign_in_if_asked(page, story, alice)
    await page.locator(f"#connection-{alices}").wait_for()
    assert await page.locator(f"#connection-{bobs}").count() == 0
    csrf = await page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert csrf

    # Bob's grant, with alice's valid session and token: as if it did not exist.
    other = await page.request.post(f"{story.app.url}/me/grants/gr_{bob_grant.hex}/revoke", form={"csrf_token": csrf})
    assert other.status == 404
    forged = await page.request.post(
        f"{story.app.url}/me/connections/{alices}/disconnect", form={"csrf_token": "not-the-token"}
    )
    assert forged.status == 403
    assert (await token(story, a, bob)).status_code == 200
    assert (await token(story, a, alice)).status_code == 200

    revocations = len(story.acme.revocations())
    section = page.locator(f"#connection-{alices}")
    async with page.expect_navigation():
        await section.locator("button.disconnect").click()
    assert await page.locator(f"#connection-{alices}").count() == 0
    assert (await token(story, a, alice)).status_code == 404
    assert len(story.acme.revocations()) == revocations + 1  # revoked at Acme too
    assert [g[2] for g in await grants_of(story, alices)] == ["disconnect"]
    assert minted["access_token"] not in await page.content()
