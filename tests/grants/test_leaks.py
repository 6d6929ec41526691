"""No token leaves elicitd through anything about grants.

Marker strings are planted as Acme's access token, refresh token and authorization code. A connect
through A, a grant page answered for B, alice's own page, a revocation there, the refusals that
follow, and an operator's grant, listing and revocation through the admin API all happen; then no
marker may appear in a log line, a page, an error or admin body, a grant or trust-group row, the
audit log, a flow or its events — only the access token, in a token answer to a granted client.
"""

from __future__ import annotations

import logging
import uuid
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.admin.tokens import Role, create_token, parse_lifetime
from tests.grants.conftest import Story, create_connect_flow, new_sub, sign_in_if_asked, token
from tests.support.apps import LogCapture, new_server_client
from tests.support.browser import login_at_issuer

pytestmark = pytest.mark.browser


async def test_no_token_in_any_grant_log_page_error_or_admin_field(story: Story, browser_page: Page) -> None:
    page = browser_page
    marker = uuid.uuid4().hex[:12]
    access, refresh, code = f"LEAKAT{marker}", f"LEAKRT{marker}", f"LEAKCODE{marker}"
    secrets = {"access token": access, "refresh token": refresh, "code": code}
    a = await new_server_client(story.app, display_name="Acme Files Assistant")
    b = await new_server_client(story.app, display_name="Other Server")
    async with story.app.state.sessions() as session:
        admin = await create_token(session, name="leaks", role=Role.ADMIN, lifetime=parse_lifetime("1h"))
        await session.commit()
    admin_headers = {"Authorization": f"Bearer {admin.secret}"}
    alice = new_sub("alice")

    capture = LogCapture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    answers: list[tuple[str, httpx.Response]] = []
    pages: list[str] = []
    try:
        created = await create_connect_flow(story, a, alice, scopes=["files:read"])
        await page.goto(created["flow"]["url"])
        await sign_in_if_asked(page, story, alice)
        await page.locator("#connect-form").wait_for()
        story.acme.plant(access_token=access, refresh_token=refresh, code=code)
        async with page.expect_navigation():
            await page.click("#continue")
        await login_at_issuer(page, f"{alice}@acme", issuer=story.acme.issuer)
        await page.locator("#outcome").wait_for()
        pages.append(await page.content())

        answers.append(("B before", await token(story, b, alice)))
        asked = await create_connect_flow(story, b, alice, scopes=["files:read"])
        await page.goto(asked["flow"]["url"])
        await page.locator("#grant-form").wait_for()
        pages.append(await page.content())
        async with page.expect_navigation():
            await page.click("#allow")
        pages.append(await page.content())
        granted = await token(story, b, alice)
        async with story.app.http(b.api_key) as http:
            answers.append(("B status", await http.get(f"/v1/flows/{asked['flow']['id']}")))
            answers.append(
                (
                    "B wider",
                    await http.get(
                        f"/v1/connections/{story.provider}/token",
                        params={"iss": story.iss, "sub": alice, "scopes": "files:write"},
                    ),
                )
            )

        await page.goto(f"{story.app.url}/me?iss={quote(story.iss, safe='')}")
        pages.append(await page.content())
        connection = granted.json()["connection_id"]
        async with page.expect_navigation():
            await (
                page.locator(f"#connection-{connection} .grant", has_text="Other Server")
                .locator("button.revoke")
                .click()
            )
        pages.append(await page.content())
        answers.append(("B after", await token(story, b, alice)))
        async with story.app.http(b.api_key) as http:
            answers.append(
                (
                    "B delete",
                    await http.delete(f"/v1/connections/{story.provider}", params={"iss": story.iss, "sub": alice}),
                )
            )

        async with httpx.AsyncClient(base_url=story.app.url, headers=admin_headers) as http:
            given = await http.put(f"/admin/v1/connections/{connection}/grants/{b.name}", json={"scopes": []})
            answers.append(("admin give", given))
            answers.append(("admin list", await http.get("/admin/v1/grants", params={"connection_id": connection})))
            answers.append(("admin show", await http.get(f"/admin/v1/grants/{given.json()['id']}")))
            answers.append(("admin revoke", await http.post(f"/admin/v1/grants/{given.json()['id']}/revoke")))
            answers.append(("admin connection", await http.get(f"/admin/v1/connections/{connection}")))
            answers.append(("admin groups", await http.get("/admin/v1/trust-groups")))
            answers.append(("admin audit", await http.get("/admin/v1/audit")))
            answers.append(("admin audit export", await http.get("/admin/v1/audit/export")))
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)

    assert granted.status_code == 200 and granted.json()["access_token"] == access  # the one way out
    assert refresh not in granted.text and code not in granted.text
    assert [r.status_code for _, r in answers] == [404, 200, 409, 404, 404, 200, 200, 200, 200, 200, 200, 200, 200]
    assert capture.lines, "the log capture saw nothing; the test would prove nothing"
    for line in capture.lines:
        for name, value in secrets.items():
            assert value not in line, f"{name} in a log line: {line}"
    for label, response in answers:
        for name, value in secrets.items():
            assert value not in response.text, f"{name} in the {label} answer"
    for html in pages:
        for name, value in secrets.items():
            assert value not in html, f"{name} in a page"
    async with story.app.state.sessions() as session:
        stored = [
            *(await session.execute(text("SELECT row_to_json(g)::text FROM grants g"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(t)::text FROM trust_groups t"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(a)::text FROM admin_audit_log a"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(f)::text FROM flows f"))).scalars(),
            *(await session.execute(text("SELECT detail::text FROM flow_events"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(c)::text FROM connections c"))).scalars(),
        ]
    assert stored
    for row in stored:
        for name, value in secrets.items():
            assert value not in row and value.encode().hex() not in row, f"{name} stored in clear: {row[:200]}"
