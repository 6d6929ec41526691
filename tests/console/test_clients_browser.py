"""The server-client pages in Chromium: an admin registers a client and its API key is shown once and
never again (reload, back and forward, its page, the HTML source); an operator replays a webhook
delivery and the audit row is the one the admin API's replay writes. Both walk the pages with
axe-core and, with ``ELICITD_SCREENSHOTS=docs/screenshots``, save the documentation's screenshots."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from sqlalchemy import text

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, make_token
from tests.console.conftest import USERS, assert_same_audit_row, audit_rows
from tests.console.test_clients import authenticates, parked_delivery
from tests.support.apps import RunningApp
from tests.support.axe import violations, with_axe
from tests.support.browser import save_screenshot
from tests.support.waiting import until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


async def looked_at(page: Page, name: str, **options: Any) -> None:
    """axe-core finds nothing on the page; its screenshot is kept (for the docs when asked)."""
    assert await violations(page) == [], page.url
    await save_screenshot(page, f"console-clients-{name}")
    target = os.environ.get("ELICITD_SCREENSHOTS")
    if target:
        path = Path(target) / f"console-clients-{name}.png"
        await page.screenshot(path=str(path), full_page=True, **options)


async def test_a_new_api_key_is_shown_once_and_never_again(
    elicitd: RunningApp, browser_context: Any, signed_in_page: Any
) -> None:
    await with_axe(browser_context)
    page = await signed_in_page(await browser_context.new_page(), Role.ADMIN)
    await page.goto(f"{elicitd.url}/console/clients")
    async with page.expect_navigation():
        await page.click("#new-client")
    name = f"files-{uuid.uuid4().hex[:8]}"
    await page.fill("#name", name)
    await page.fill("#display_name", "Acme Files Assistant")
    await page.fill("#resource_uris", "https://files.acme.example/mcp")
    await page.fill("#flows_per_minute", "60")
    await looked_at(page, "new")
    async with page.expect_navigation():
        await page.click("#create")
    key = await page.input_value("#secret")
    assert key.startswith("elk_") and await authenticates(elicitd, key)
    await looked_at(page, "key-shown-once", mask=[page.locator("#secret")], mask_color="#8c959f")
    answer_url = page.url

    async def key_absent(where: str) -> None:
        try:
            html = await page.content()
        except PlaywrightError:  # a navigation still settling: read it once it has
            await page.wait_for_load_state()
            html = await page.content()
        assert key not in html, where

    # Reload: the browser sends the form again; the name is taken now, so no key (409).
    await page.reload()
    await key_absent("reload")
    assert page.url == f"{elicitd.url}/console/clients" and "already exists" in await page.content()
    # Back to the form, forward to the answer: not stored (no-store), so not shown.
    await page.go_back()
    await key_absent("back")
    with contextlib.suppress(PlaywrightError):  # ERR_CACHE_MISS: the answer was not kept
        await page.go_forward()
    await key_absent("forward")
    assert page.url.startswith("chrome-error://")

    await page.goto(f"{elicitd.url}/console/clients")
    await key_absent("the list")
    await looked_at(page, "list")
    async with page.expect_navigation():
        # Its own row (named by its unique name): other tests' clients share the display name.
        await page.click(f"tr:has(code:has-text('{name}')) a")
    assert "/console/clients/sc_" in page.url and page.url != answer_url
    await key_absent("its page")
    assert await page.locator("#keys code").first.inner_text() == key.split("_")[1] + "…"
    source = await page.request.get(page.url)
    assert source.status == 200 and key not in await source.text()
    await looked_at(page, "detail")
    # The other pages of the area, as an admin sees them.
    await page.click("#endpoints summary")
    await page.fill("#url", "http://127.0.0.1:9/hook")
    async with page.expect_navigation():
        await page.click("#create-endpoint")
    secret = await page.input_value("#secret")
    assert secret.startswith("whsec_")
    async with page.expect_navigation():
        await page.click("#done")
    assert "/console/webhook-endpoints/we_" in page.url
    await key_absent("endpoint page")
    assert secret not in await page.content()
    await looked_at(page, "endpoint")


async def test_an_operator_replays_a_delivery_and_the_audit_row_is_the_apis(
    elicitd: RunningApp, browser_context: Any, signed_in_page: Any
) -> None:
    client_id, delivery = await parked_delivery(elicitd)
    async with elicitd.state.sessions() as session:
        tried = (
            await session.execute(
                text("SELECT attempts FROM webhook_outbox WHERE id = :i"), {"i": uuid.UUID(delivery[4:])}
            )
        ).scalar_one()
    operator_token = await make_token(elicitd, "operator")
    async with admin_http(elicitd, operator_token) as http:
        replayed = await http.post(f"/admin/v1/webhooks/{delivery}/replay")
    assert replayed.status_code == 200, replayed.text

    async def parked_again() -> bool:
        """Abandoned again once the worker's attempt (to a closed port) has let go of it."""
        async with elicitd.state.sessions() as session:
            done = await session.execute(
                text(
                    "UPDATE webhook_outbox SET abandoned_at = now() WHERE id = :i AND attempts > :tried "
                    "AND (lease_until IS NULL OR lease_until <= now()) RETURNING id"
                ),
                {"i": uuid.UUID(delivery[4:]), "tried": tried},
            )
            found = done.first() is not None
            await session.commit()
        return found

    await until(parked_again, what="the replayed delivery's attempt")

    await with_axe(browser_context)
    page = await signed_in_page(await browser_context.new_page(), Role.OPERATOR)
    await page.goto(f"{elicitd.url}/console/clients/{client_id}")
    assert await page.locator("#deliveries .badge").first.inner_text() == "Abandoned"
    async with page.expect_navigation():
        await page.click("#all-deliveries")
    await looked_at(page, "deliveries")
    async with page.expect_navigation():
        await page.click(f"#replay-{delivery}")
    assert page.url.endswith(f"/console/clients/{client_id}/deliveries?done=replayed")
    assert await page.locator("#notice").is_visible()
    assert await page.locator(f"#delivery-{delivery} .badge").inner_text() in {"Pending", "In flight"}
    await looked_at(page, "replayed")

    rows = [
        r for r in await audit_rows(elicitd, "adminReplayWebhookDelivery") if r["target"] == f"delivery_id={delivery}"
    ]
    api_row, console_row = [r for r in rows if r["actor"] == "api"], [r for r in rows if r["actor"] == "console"]
    assert len(api_row) == 1 and len(console_row) == 1
    assert_same_audit_row(console_row[0], api_row[0], USERS[Role.OPERATOR])
    assert (console_row[0]["role"], console_row[0]["status"], console_row[0]["method"]) == ("operator", 200, "POST")
