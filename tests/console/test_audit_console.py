"""The console's Audit pages: the log filtered and paged, its export, the chain check naming the
first broken link, admin only as in the API; reading any of them writes a row (actor ``console``)
the way the API's reads do. In Chromium: axe-core finds nothing, and the pages are photographed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, make_token
from tests.console.conftest import USERS, audit_rows
from tests.support.apps import RunningApp
from tests.support.axe import violations, with_axe
from tests.support.browser import save_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


async def looked_at(page: Page, name: str) -> None:
    assert await violations(page) == [], page.url
    await save_screenshot(page, f"console-audit-{name}")
    target = os.environ.get("ELICITD_SCREENSHOTS")
    if target:
        await page.screenshot(path=str(Path(target) / f"console-audit-{name}.png"), full_page=True)


async def test_reading_the_audit_in_the_console_is_audited_and_admin_only(elicitd: RunningApp, console: Any) -> None:
    token = await make_token(elicitd, "admin")
    async with admin_http(elicitd, token) as http:
        assert (await http.post("/admin/v1/server-clients", json={"name": "audit-page-client"})).status_code == 201
    for role in (Role.VIEWER, Role.OPERATOR):
        async with console(role) as c:
            for path in ("/console/audit", "/console/audit/verify", "/console/audit/export"):
                assert (await c.get(path)).status_code == 403, (role, path)
    async with console(Role.ADMIN) as c:
        page = await c.get("/console/audit", params={"operation": "adminCreateServerClient", "window": "1h"})
        assert page.status_code == 200
        assert "adminCreateServerClient" in page.text and token.id in page.text
        assert "adminWhoAmI" not in page.text  # the filter holds
        one = await c.get("/console/audit", params={"window": "all", "limit": 1})
        assert 'rel="next"' in one.text
        checked = await c.get("/console/audit/verify")
        assert checked.status_code == 200 and 'id="verdict" role="status"' in checked.text
        exported = await c.get("/console/audit/export")
        bad = await c.get("/console/audit", params={"since": "yesterday"})
    assert bad.status_code == 400
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/plain")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [r["seq"] for r in lines] == list(range(lines[0]["seq"], lines[0]["seq"] + len(lines)))
    # The console's export is the API's, row for row.
    async with admin_http(elicitd, token) as http:
        api = await http.get("/admin/v1/audit/export", params={"after_seq": lines[0]["seq"] - 1})
    assert api.text.splitlines()[: len(lines)] == exported.text.splitlines()
    for operation in ("adminListAudit", "adminVerifyAudit", "adminExportAudit"):
        mine = [r for r in await audit_rows(elicitd, operation) if r["actor"] == "console"]
        admin_rows = [r for r in mine if r["detail"].get("operator", {}).get("sub") == USERS[Role.ADMIN]]
        assert admin_rows, operation
        assert admin_rows[-1]["status"] == (400 if operation == "adminListAudit" else 200)
        assert (admin_rows[-1]["method"], admin_rows[-1]["role"]) == ("GET", "admin")
        refused = [r for r in mine if r["status"] == 403]
        assert {r["detail"]["operator"]["sub"] for r in refused} >= {USERS[Role.VIEWER], USERS[Role.OPERATOR]}


async def test_audit_pages_in_chromium_and_a_broken_link_named(
    elicitd: RunningApp, browser_context: Any, signed_in_page: Any
) -> None:
    await with_axe(browser_context)
    page = await signed_in_page(await browser_context.new_page(), Role.ADMIN)
    await page.goto(f"{elicitd.url}/console/audit?window=1h")
    assert await page.locator("#audit tbody tr").count() >= 1
    await looked_at(page, "log")
    await page.select_option("#a-actor", "console")
    async with page.expect_navigation():
        await page.click("#search")
    assert "actor=console" in page.url
    assert await page.locator("#audit tbody tr").count() >= 1
    async with page.expect_download() as downloading:
        await page.click("#export-link")
    saved = await (await downloading.value).path()
    assert all(json.loads(line)["hash"] for line in Path(saved).read_text().splitlines())
    await page.goto(f"{elicitd.url}/console/audit/verify")
    assert await page.locator("#verdict .badge.good").count() == 1
    await looked_at(page, "verify")

    # One row edited around the table's triggers: the page names it; then put back as it was.
    async with elicitd.state.sessions() as session:
        row = (
            await session.execute(text("SELECT seq, id, status FROM admin_audit_log ORDER BY seq LIMIT 1 OFFSET 2"))
        ).one()
        await session.execute(text("SET LOCAL session_replication_role = replica"))
        await session.execute(text("UPDATE admin_audit_log SET status = 299 WHERE seq = :s"), {"s": row.seq})
        await session.commit()
    try:
        await page.goto(f"{elicitd.url}/console/audit/verify")
        assert await page.locator("#broken-id").inner_text() == f"au_{row.id.hex}"
        assert f"Row {row.seq} was changed after it was written." in await page.locator("#verdict").inner_text()
        await looked_at(page, "verify-broken")
    finally:
        async with elicitd.state.sessions() as session:
            await session.execute(text("SET LOCAL session_replication_role = replica"))
            await session.execute(
                text("UPDATE admin_audit_log SET status = :v WHERE seq = :s"), {"s": row.seq, "v": row.status}
            )
            await session.commit()
    await page.goto(f"{elicitd.url}/console/audit/verify")
    assert await page.locator("#verdict .badge.good").count() == 1
