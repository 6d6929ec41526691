"""Grants in Chromium: an operator revokes a grant from its page (by keyboard) and the audit row is
the one the admin API's revoke writes; axe-core finds nothing on the grant's page before and after."""

from __future__ import annotations

from typing import Any

import pytest

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, make_token
from tests.console.conftest import USERS, assert_same_audit_row, audit_rows, looked_at
from tests.console.test_grants_payments import granted_connection
from tests.support.apps import RunningApp
from tests.support.axe import with_axe
from tests.support.oauth_server import OAuthServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


async def _give(app: RunningApp, oauth: OAuthServer) -> tuple[str, str]:
    """A grant given through the admin API: its id and its connection's."""
    connection, client = await granted_connection(app, oauth)
    async with admin_http(app, await make_token(app, "admin")) as api:
        given = await api.put(f"/admin/v1/connections/{connection}/grants/{client}", json={"scopes": ["files:read"]})
    assert given.status_code == 200, given.text
    return str(given.json()["id"]), str(connection)


async def test_an_operator_revokes_a_grant_and_the_row_is_the_apis(
    elicitd: RunningApp, oauth: OAuthServer, browser_context: Any, signed_in_page: Any
) -> None:
    (mine, connection), (theirs, _) = await _give(elicitd, oauth), await _give(elicitd, oauth)
    await with_axe(browser_context)
    page = await signed_in_page(await browser_context.new_page(), Role.OPERATOR, return_to="/console/grants")
    # Found by its connection: the console's one instance holds every console test's grants, and
    # the list shows fifty to a page.
    await page.fill("#connection_id", connection)
    async with page.expect_navigation():
        await page.click("#filter")
    async with page.expect_navigation():
        await page.click(f"a[href='/console/grants/{mine}']")
    await looked_at(page, "grants-grant")
    await page.focus("#revoke-button")  # reachable from the keyboard, and Enter submits
    async with page.expect_navigation():
        await page.keyboard.press("Enter")
    assert page.url.endswith(f"/console/grants/{mine}?done=revoked")
    assert "The grant is revoked" in await page.inner_text("#notice")
    assert await page.locator("#revoke-grant").count() == 0
    await looked_at(page, "grants-grant-revoked")

    async with admin_http(elicitd, await make_token(elicitd, "operator")) as api:
        assert (await api.post(f"/admin/v1/grants/{theirs}/revoke")).status_code == 200
    (console_row,) = await audit_rows(elicitd, "adminRevokeGrant", target=f"grant_id={mine}")
    (api_row,) = await audit_rows(elicitd, "adminRevokeGrant", target=f"grant_id={theirs}")
    assert_same_audit_row(console_row, {**api_row, "target": f"grant_id={mine}"}, USERS[Role.OPERATOR])
    assert (console_row["route"], console_row["method"], console_row["status"]) == (
        "/admin/v1/grants/{grant_id}/revoke",
        "POST",
        200,
    )
