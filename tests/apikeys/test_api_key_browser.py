"""API-key entry in real Chromium: valid, refused by the provider's live check, malformed, too long.

The key must reach exactly one place — the vault, served back by the token endpoint — and never
a page, a log line, a flow result, an event or the MCP client's answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
from playwright.async_api import Page
from sqlalchemy import text

from tests.consent.helpers import create_flow, flow_row, new_sub, open_as, transitions
from tests.support.apps import LogCapture, RunningApp, ServerClientHandle
from tests.support.browser import save_screenshot
from tests.support.oauth_server import OAuthServer


def body(issuer: OAuthServer, sub: str, provider: str) -> dict[str, Any]:
    return {"subject": {"iss": issuer.issuer, "sub": sub}, "kind": "api_key", "provider": provider}


async def submit(page: Page, secret: str, *, region: str = "eu", account: str = "") -> None:
    await page.fill("#secret", secret)
    await page.select_option("#field_region", region)
    await page.fill("#field_account", account)
    async with page.expect_navigation():
        await page.click("#save")


async def all_text(app: RunningApp, flow_ref: str) -> str:
    """Everything stored about a flow in clear: its row and its events."""
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT row_to_json(f)::text FROM flows f WHERE id = CAST(:id AS uuid) "
                "UNION ALL SELECT row_to_json(e)::text FROM flow_events e WHERE flow_id = CAST(:id AS uuid)"
            ),
            {"id": flow_ref[3:]},
        )
        return "\n".join(r[0] for r in rows)


async def test_a_valid_key_is_stored_and_served_by_the_token_endpoint(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, browser_page: Page
) -> None:
    sub = new_sub("erin")
    key = issuer.mint(sub)["access_token"]
    created = await create_flow(app, client, body(issuer, sub, provider))
    flow_id = created["flow"]["id"]
    assert (
        created["mcp"]["inputRequests"][f"elicitd_{flow_id}"]["params"]["message"]
        == "Enter your Acme API API key to continue."
    )
    async with app.http(client.api_key) as http:
        waiting = asyncio.create_task(
            http.post(
                "/v1/flows/resolve",
                json={
                    "subject": created["flow"]["subject"],
                    "request_state": created["mcp"]["requestState"],
                    "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
                    "wait_seconds": 25,
                },
            )
        )
        capture = LogCapture()
        root = logging.getLogger()
        level = root.level
        root.addHandler(capture)
        root.setLevel(logging.DEBUG)
        try:
            await open_as(browser_page, created["flow"]["url"], sub, issuer)
            assert await browser_page.locator("#secret").get_attribute("type") == "password"
            assert "Acme Ops Assistant" in await browser_page.locator("main").inner_text()
            await save_screenshot(browser_page, "api-key-page")
            checks_before = issuer.stats().api_calls.get("/api/me", 0)
            await submit(browser_page, key, region="us", account="123456")
            assert await browser_page.locator("#outcome").inner_text() == "Saved"
            await save_screenshot(browser_page, "api-key-saved")
            resolved = await waiting
        finally:
            root.removeHandler(capture)
            root.setLevel(level)
        assert issuer.stats().api_calls.get("/api/me", 0) == checks_before + 1

        assert resolved.status_code == 200
        answer = resolved.json()
        assert answer["outcome"] == "completed"
        connection_id = answer["result"]["connection_id"]
        assert answer["result"] == {
            "connection_id": connection_id,
            "provider": provider,
            "account_id": "123456",
            "fields": {"region": "us", "account": "123456"},
        }
        token = await http.get(f"/v1/connections/{provider}/token", params={"iss": issuer.issuer, "sub": sub})
    assert token.status_code == 200
    assert token.json()["access_token"] == key
    assert token.json()["token_type"] == "api_key"
    assert token.json()["connection_id"] == connection_id

    # Nowhere else: not in the MCP answers, the page, the flow row and events, or a log line.
    assert key not in resolved.text and key not in json.dumps(created)
    assert key not in await browser_page.content()
    assert key not in await all_text(app, flow_id)
    assert capture.lines, "the capture saw elicitd's log lines"
    assert not [line for line in capture.lines if key in line]
    async with app.state.sessions() as session:
        stored = (
            await session.execute(
                text("SELECT access_token_enc FROM connections WHERE provider = :p AND subject_sub = :s"),
                {"p": provider, "s": sub},
            )
        ).scalar_one()
    assert key.encode() not in stored
    assert [(t["actor"], t["to_status"]) for t in await transitions(app, flow_id)] == [("browser", "completed")]

    # Asking again answers at once: the subject already has a key for this provider.
    again = await create_flow(app, client, body(issuer, sub, provider), expect=200)
    assert again["status"] == "completed"
    assert again["result"]["connection_id"] == connection_id


async def test_a_key_the_provider_refuses_is_not_stored(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, browser_page: Page
) -> None:
    sub = new_sub("frank")
    wrong = "at_" + "x" * 32
    created = await create_flow(app, client, body(issuer, sub, provider))
    flow_id = created["flow"]["id"]
    await open_as(browser_page, created["flow"]["url"], sub, issuer)
    await submit(browser_page, wrong, account="98765")
    assert "did not accept this API key" in await browser_page.locator("#error").inner_text()
    assert await browser_page.locator("#secret").input_value() == ""
    assert await browser_page.locator("#field_account").input_value() == "98765"
    assert wrong not in await browser_page.content()
    await save_screenshot(browser_page, "api-key-refused-by-provider")
    row = await flow_row(app, flow_id)
    assert row["status"] == "pending"
    assert await transitions(app, flow_id) == []
    async with app.http(client.api_key) as http:
        token = await http.get(f"/v1/connections/{provider}/token", params={"iss": issuer.issuer, "sub": sub})
        status = await http.get(f"/v1/flows/{flow_id}")
    assert token.status_code == 404
    assert token.json()["code"] == "not_connected"
    assert status.json()["flow"]["status"] == "pending"
    # The user corrects it on the same page: the flow completes.
    await submit(browser_page, issuer.mint(sub)["access_token"])
    assert await browser_page.locator("#outcome").inner_text() == "Saved"
    assert (await flow_row(app, flow_id))["status"] == "completed"


async def test_malformed_or_too_long_keys_are_refused_before_any_provider_call(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, browser_page: Page
) -> None:
    sub = new_sub("gina")
    created = await create_flow(app, client, body(issuer, sub, provider))
    flow_id = created["flow"]["id"]
    await open_as(browser_page, created["flow"]["url"], sub, issuer)
    checks = issuer.stats().api_calls.get("/api/me", 0)

    await submit(browser_page, "a" * 101)
    assert "too long" in await browser_page.locator("#error").inner_text()
    await save_screenshot(browser_page, "api-key-too-long")
    await submit(browser_page, "short")
    assert "too short" in await browser_page.locator("#error").inner_text()
    await submit(browser_page, "has spaces and ümlauts in it")
    assert "does not look like the" in await browser_page.locator("#error").inner_text()
    await save_screenshot(browser_page, "api-key-invalid-characters")
    await submit(browser_page, "a" * 30, account="12")
    assert "Account id is not valid" in await browser_page.locator("#error").inner_text()

    assert issuer.stats().api_calls.get("/api/me", 0) == checks, "no malformed key may reach the provider"
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert await transitions(app, flow_id) == []
    async with app.state.sessions() as session:
        reasons = [
            r[0]
            for r in await session.execute(
                text(
                    "SELECT detail->>'reason' FROM flow_events WHERE flow_id = CAST(:f AS uuid) AND type = 'api_key_rejected' "
                    "ORDER BY id"
                ),
                {"f": flow_id[3:]},
            )
        ]
    assert reasons == ["too_long", "too_short", "bad_characters", "bad_field"]


async def test_another_account_is_refused_and_cannot_submit(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, browser_page: Page
) -> None:
    owner, intruder = new_sub("hank"), new_sub("mallory")
    created = await create_flow(app, client, body(issuer, owner, provider))
    flow_id = created["flow"]["id"]
    await open_as(browser_page, created["flow"]["url"], intruder, issuer)
    assert await browser_page.locator("#secret").count() == 0
    assert "another account" in (await browser_page.locator("main").inner_text()).lower()
    await save_screenshot(browser_page, "api-key-refused-other-account")
    token = await browser_page.locator("input[name=csrf_token]").first.get_attribute("value")
    response = await browser_page.request.post(
        f"{app.url}/f/{flow_id}/api-key",
        form={"csrf_token": token or "", "secret": issuer.mint(intruder)["access_token"], "field_region": "eu"},
    )
    assert response.status == 403
    assert (await flow_row(app, flow_id))["status"] == "pending"
    async with httpx.AsyncClient(base_url=app.url) as anonymous:
        no_session = await anonymous.post(f"/f/{flow_id}/api-key", data={"secret": "x" * 30}, follow_redirects=False)
    assert no_session.status_code == 303  # sent to log in first; nothing stored
    assert (await flow_row(app, flow_id))["status"] == "pending"
