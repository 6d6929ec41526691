"""The Flows and People pages in Chromium: an operator finds a person's flow, cancels it, and the
audit row is the one the admin API's cancel writes; the People page answers "why did this person's
tool call fail?" (a connection that needs reauthorization, a failed flow with its reason) on one
page. Each page passes axe-core and, with ``ELICITD_SCREENSHOTS=docs/screenshots``, is saved for the
documentation."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

import pytest

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, make_token
from tests.console.conftest import assert_same_audit_row, audit_rows, looked_at
from tests.console.test_flows_people import _broken_connection, new_flow
from tests.support.apps import RunningApp, new_server_client
from tests.support.axe import with_axe
from tests.support.oauth_server import OAuthServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


async def test_an_operator_cancels_a_flow_and_reads_why_a_tool_fails(
    elicitd: RunningApp, oauth: OAuthServer, browser_context: Any, signed_in_page: Any
) -> None:
    client = await new_server_client(elicitd, display_name="Acme Files Assistant")
    sub = f"alice-{uuid.uuid4().hex[:6]}"
    connection, _ = await _broken_connection(elicitd, oauth, sub, client)
    failed = await new_flow(elicitd, client.api_key, oauth.issuer, sub)
    async with elicitd.http(client.api_key) as http:
        body = {"code": "upstream_denied", "message": "The files service refused the folder."}
        assert (await http.post(f"/v1/flows/{failed}/fail", json=body)).status_code == 200
    completed = await new_flow(elicitd, client.api_key, oauth.issuer, sub)
    async with elicitd.http(client.api_key) as http:
        result = {"folder_id": "f-123", "files": [{"name": "report.pdf", "size": 1024}], "shared": True}
        assert (await http.post(f"/v1/flows/{completed}/complete", json={"result": result})).status_code == 200
    pending = await new_flow(elicitd, client.api_key, oauth.issuer, sub)
    by_api = await new_flow(elicitd, client.api_key, oauth.issuer, f"other-{sub}")
    token = await make_token(elicitd, "operator")
    oauth.fail_next_refresh("invalid_grant")
    async with admin_http(elicitd, token) as http:
        assert (await http.post(f"/admin/v1/connections/{connection}/refresh")).status_code == 409
        assert (await http.post(f"/admin/v1/flows/{by_api}/cancel")).status_code == 200

    await with_axe(browser_context)
    page = await signed_in_page(await browser_context.new_page(), Role.OPERATOR)
    await page.goto(f"{elicitd.url}/console/flows")
    await page.fill("#f-iss", oauth.issuer)
    await page.fill("#f-sub", sub)
    async with page.expect_navigation():
        await page.click("#search")
    assert await page.locator("#flows tbody tr").count() == 3
    await looked_at(page, "flows-search")
    async with page.expect_navigation():
        await page.click(f'a[href="/console/flows/{completed}"]')
    assert "report.pdf" not in await page.content() and "f-123" not in await page.content()
    assert '"folder_id": "string"' in await page.inner_text("#result-shape")
    await looked_at(page, "flows-detail")

    await page.goto(f"{elicitd.url}/console/flows/{pending}")
    await page.focus("#cancel-flow")  # reachable by keyboard, and its focus is visible
    assert await page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    async with page.expect_navigation():
        await page.keyboard.press("Enter")
    assert await page.inner_text("#notice") == "The flow is cancelled."
    assert "Cancelled" in await page.inner_text("#flow-state")
    assert await page.locator("#cancel-flow").count() == 0
    await looked_at(page, "flows-cancelled")

    rows = await audit_rows(elicitd, "adminCancelFlow")
    (api_row,) = [r for r in rows if r["target"] == f"flow_id={by_api}"]
    (console_row,) = [r for r in rows if r["target"] == f"flow_id={pending}"]
    assert_same_audit_row(console_row, {**api_row, "target": f"flow_id={pending}"}, "otto")

    # Why did alice's tool call fail? One page: the connection needs reauthorization (invalid_grant)
    # and her latest flows, the failed one with its code and reason.
    await page.goto(f"{elicitd.url}/console/people?{urlencode({'iss': oauth.issuer, 'sub': sub})}")
    findings = await page.inner_text("#findings")
    assert "No authorization of this connection works any more: the person must reconnect." in findings
    card = await page.inner_text(f'[id="{connection}"]')
    assert "Needs reauthorization" in card and "invalid_grant" in card and "Acme Files Assistant" in card
    recent = await page.inner_text("#recent-flows")
    assert "upstream_denied" in recent and "The files service refused the folder." in recent
    await looked_at(page, "people-person")
    async with page.expect_navigation():
        await page.click(f'[id="reconnect-{connection}"]')
    assert (await page.inner_text("#reconnect-url")).startswith(elicitd.url)
    await looked_at(page, "people-reconnect-link")
    await page.goto(f"{elicitd.url}/console/people")
    assert sub in await page.inner_text("#attention")
    await looked_at(page, "people-list")
