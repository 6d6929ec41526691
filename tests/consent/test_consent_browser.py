"""Consent end to end: a real login at a real issuer, real Chromium, the API checked alongside.

The receipt is verified the way a third party would: with nothing but the JWK Set elicitd
publishes at ``/.well-known/jwks.json``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import uuid
from typing import Any

import httpx
import pytest
from joserfc import jws
from joserfc.errors import BadSignatureError
from joserfc.jwk import KeySet
from playwright.async_api import Page
from sqlalchemy import text

from tests.consent.helpers import create_flow, event_types, flow_row, new_sub, open_as, transitions
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.browser import save_screenshot
from tests.support.oauth_server import OAuthServer
from tests.support.waiting import parked

TITLE = "Book flight LH 123 to Lisbon"
DESCRIPTION = (
    "Acme Travel will book one economy seat on LH 123 from Berlin to Lisbon on 12 March\n"
    "and charge the card on file. The booking cannot be cancelled for free."
)
DETAILS = [{"key": "Flight", "value": "LH 123, BER → LIS"}, {"key": "Price", "value": "189.00 EUR"}]
SHOWN_TEXT = f"{TITLE}\n\n{DESCRIPTION}\n\nFlight: LH 123, BER → LIS\nPrice: 189.00 EUR"


def consent_body(issuer: OAuthServer, sub: str) -> dict[str, Any]:
    return {
        "subject": {"iss": issuer.issuer, "sub": sub},
        "kind": "consent",
        "params": {"title": TITLE, "description": DESCRIPTION, "details": DETAILS},
    }


async def start_waiting_resolve(
    app: RunningApp, client: ServerClientHandle, created: dict[str, Any], sub: str, issuer: OAuthServer
) -> asyncio.Task[httpx.Response]:
    """The MCP client accepted the URL elicitation; its retry waits for the browser side."""
    flow_id = created["flow"]["id"]
    body = {
        "subject": {"iss": issuer.issuer, "sub": sub},
        "request_state": created["mcp"]["requestState"],
        "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
        "wait_seconds": 25,
    }

    async def call() -> httpx.Response:
        async with app.http(client.api_key) as http:
            return await http.post("/v1/flows/resolve", json=body)

    return asyncio.create_task(call())


async def test_approve_completes_with_a_receipt_verifiable_with_the_published_key(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, browser_page: Page
) -> None:
    sub = new_sub("alice")
    created = await create_flow(app, client, consent_body(issuer, sub))
    flow_id = created["flow"]["id"]
    assert created["mcp"]["inputRequests"][f"elicitd_{flow_id}"]["params"]["message"] == f"Review and approve: {TITLE}"
    waiting = await start_waiting_resolve(app, client, created, sub, issuer)

    await open_as(browser_page, created["flow"]["url"], sub, issuer)
    assert await browser_page.locator("#consent-title").inner_text() == TITLE
    assert await browser_page.locator("#consent-description").inner_text() == DESCRIPTION
    assert "Acme Travel Assistant" in await browser_page.locator("main").inner_text()
    assert await browser_page.locator("#consent-details dt").all_inner_texts() == ["Flight", "Price"]
    await save_screenshot(browser_page, "consent-page")
    # Showing the page changed nothing: the flow is pending and the resolve is still parked on it.
    await parked(app, flow_id)
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert not waiting.done(), "the resolve must still be waiting while the user reads the page"

    started = time.time()
    async with browser_page.expect_navigation():
        await browser_page.click("#approve")
    assert await browser_page.locator("#outcome").inner_text() == "Approved"
    assert "You can return to Acme Travel Assistant" in await browser_page.locator("main").inner_text()
    await save_screenshot(browser_page, "consent-approved")

    resolved = await waiting
    assert resolved.status_code == 200, resolved.text
    answer = resolved.json()
    assert answer["outcome"] == "completed"
    assert answer["flow"]["status"] == "completed"
    result = answer["result"]
    assert result["decision"] == "approved"
    assert result["text_sha256"] == hashlib.sha256(SHOWN_TEXT.encode()).hexdigest()

    async with httpx.AsyncClient(base_url=app.url) as http:
        published = await http.get("/.well-known/jwks.json")
    assert published.status_code == 200
    assert published.headers["content-type"].startswith("application/jwk-set+json")
    key_set = KeySet.import_key_set(published.json())
    verified = jws.deserialize_compact(result["receipt"], key_set, algorithms=["ES256"])
    assert verified.headers()["typ"] == "consent-receipt+jwt"
    assert verified.headers()["kid"] == result["key_id"]
    claims = json.loads(verified.payload)
    assert claims["iss"] == app.url
    assert claims["sub"] == sub
    assert claims["subject_iss"] == issuer.issuer
    assert claims["flow_id"] == flow_id
    assert claims["server_client"] == {"id": client.public_id, "name": client.name}
    assert claims["aud"] == client.public_id
    assert claims["text_sha256"] == hashlib.sha256(SHOWN_TEXT.encode()).hexdigest()
    assert claims["decision"] == "approved"
    assert claims["jti"] == result["receipt_id"]
    assert started - 5 <= claims["iat"] <= time.time() + 1

    # A receipt with one byte changed no longer verifies against the published key.
    head, _, signature = result["receipt"].split(".")
    forged_claims = dict(claims, text_sha256="0" * 64)
    forged_payload = base64.urlsafe_b64encode(json.dumps(forged_claims).encode()).decode().rstrip("=")
    with pytest.raises(BadSignatureError):
        jws.deserialize_compact(f"{head}.{forged_payload}.{signature}", key_set, algorithms=["ES256"])

    async with app.http(client.api_key) as http:
        status = await http.get(f"/v1/flows/{flow_id}")
    assert status.status_code == 200
    assert status.json()["flow"]["status"] == "completed"
    assert status.json()["result"] == result
    assert [(t["actor"], t["to_status"]) for t in await transitions(app, flow_id)] == [("browser", "completed")]
    async with app.state.sessions() as session:
        stored = (
            await session.execute(
                text("SELECT text_sha256, receipt FROM consent_receipts WHERE flow_id = :f"),
                {"f": uuid.UUID(flow_id[3:])},
            )
        ).all()
    assert [(r[0], r[1]) for r in stored] == [(claims["text_sha256"], result["receipt"])]

    # Reloading the link afterwards shows the finished page, and approving again changes nothing.
    await browser_page.goto(created["flow"]["url"])
    assert await browser_page.locator("h1").inner_text() == "All done"


async def test_decline_declines_and_issues_no_receipt(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, browser_page: Page
) -> None:
    sub = new_sub("bob")
    created = await create_flow(app, client, consent_body(issuer, sub))
    flow_id = created["flow"]["id"]
    waiting = await start_waiting_resolve(app, client, created, sub, issuer)
    await open_as(browser_page, created["flow"]["url"], sub, issuer)
    async with browser_page.expect_navigation():
        await browser_page.click("#decline")
    assert await browser_page.locator("#outcome").inner_text() == "Declined"
    await save_screenshot(browser_page, "consent-declined")

    resolved = await waiting
    assert resolved.status_code == 200
    assert resolved.json()["outcome"] == "declined"
    assert "result" not in resolved.json()
    row = await flow_row(app, flow_id)
    assert (row["status"], row["result"], row["error_code"]) == ("declined", None, "declined")
    assert [(t["actor"], t["to_status"]) for t in await transitions(app, flow_id)] == [("browser", "declined")]
    async with app.state.sessions() as session:
        count = (
            await session.execute(
                text("SELECT count(*) FROM consent_receipts WHERE flow_id = :f"), {"f": uuid.UUID(flow_id[3:])}
            )
        ).scalar_one()
    assert count == 0


async def test_another_account_is_refused_and_the_flow_is_untouched(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, browser_page: Page
) -> None:
    owner, intruder = new_sub("carol"), new_sub("mallory")
    created = await create_flow(app, client, consent_body(issuer, owner))
    flow_id = created["flow"]["id"]
    await open_as(browser_page, created["flow"]["url"], intruder, issuer)
    body = await browser_page.locator("main").inner_text()
    assert TITLE not in body and DESCRIPTION.splitlines()[0] not in body
    assert "another account" in body.lower()
    await save_screenshot(browser_page, "consent-refused-other-account")

    # Even a direct POST with this browser's session (and its own valid CSRF token) is refused.
    token = await browser_page.locator("input[name=csrf_token]").first.get_attribute("value")
    response = await browser_page.request.post(
        f"{app.url}/consent/{flow_id}/decide",
        form={"csrf_token": token or "", "decision": "approve", "text_sha256": "x"},
        max_redirects=0,
    )
    assert response.status == 403
    row = await flow_row(app, flow_id)
    assert (row["status"], row["result"]) == ("pending", None)
    assert await transitions(app, flow_id) == []
    assert "subject_mismatch" in await event_types(app, flow_id)


async def test_post_without_a_valid_csrf_token_or_with_other_text_is_refused(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, browser_page: Page
) -> None:
    sub = new_sub("dave")
    created = await create_flow(app, client, consent_body(issuer, sub))
    flow_id = created["flow"]["id"]
    await open_as(browser_page, created["flow"]["url"], sub, issuer)
    digest = await browser_page.locator("input[name=text_sha256]").get_attribute("value")
    token = await browser_page.locator("input[name=csrf_token]").get_attribute("value")
    assert digest == hashlib.sha256(SHOWN_TEXT.encode()).hexdigest()

    bad_csrf = await browser_page.request.post(
        f"{app.url}/consent/{flow_id}/decide",
        form={"csrf_token": "A" * 43, "decision": "approve", "text_sha256": digest or ""},
    )
    assert bad_csrf.status == 403
    assert "text/html" in bad_csrf.headers["content-type"]
    other_text = await browser_page.request.post(
        f"{app.url}/consent/{flow_id}/decide",
        form={"csrf_token": token or "", "decision": "approve", "text_sha256": "0" * 64},
    )
    assert other_text.status == 409
    bad_decision = await browser_page.request.post(
        f"{app.url}/consent/{flow_id}/decide",
        form={"csrf_token": token or "", "decision": "maybe", "text_sha256": digest or ""},
    )
    assert bad_decision.status == 400
    row = await flow_row(app, flow_id)
    assert row["status"] == "pending"
    assert await transitions(app, flow_id) == []
