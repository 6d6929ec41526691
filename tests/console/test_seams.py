"""The console's seams over HTTP: its own session cookie, CSRF on every POST, roles, the audit row
a console action shares with the admin API call, re-authentication, idle timeout, sign-out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from sqlalchemy import text

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, complete_flow, create_flow, hooked_client, make_token
from tests.console.conftest import USERS, age_sessions, assert_same_audit_row, audit_rows, sign_in_http
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer


def _set_cookies(response: httpx.Response) -> dict[str, str]:
    return {value.split("=", 1)[0]: value for value in response.headers.get_list("set-cookie")}


async def _delivery(app: RunningApp) -> str:
    """A webhook delivery (to a closed port) of a completed flow."""
    client, _ = await hooked_client(app)
    flow_id = await create_flow(app, client)
    assert (await complete_flow(app, client, flow_id)).status_code == 200
    admin = await make_token(app, "admin")
    async with admin_http(app, admin) as http:
        found = await http.get("/admin/v1/webhooks/", params={"flow_id": flow_id})
    assert found.status_code == 200, found.text
    return str(found.json()["items"][0]["id"])


async def test_the_session_cookie_is_its_own_strict_and_http_only(elicitd: RunningApp, oauth: OAuthServer) -> None:
    http, answer = await sign_in_http(elicitd, oauth, USERS[Role.VIEWER])
    try:
        assert answer.status_code == 200
        cookies = _set_cookies(answer)
        session = cookies["elicitd_console"].lower()
        assert "httponly" in session and "samesite=strict" in session and "path=/" in session
        assert "max-age=28800" in session
        assert "elicitd_session" not in cookies  # never an end user's session
        # The callback moves on by a same-site navigation, so the Strict cookie is sent.
        assert 'http-equiv="refresh"' in answer.text and answer.headers["referrer-policy"] == "no-referrer"
        page = await http.get("/console/")
        assert page.status_code == 200
        assert page.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        # An end user's pages do not know this session.
        assert (await http.get("/me", params={"iss": oauth.issuer})).status_code in (200, 303)
        assert "Vera" not in (await http.get("/me", params={"iss": oauth.issuer}, follow_redirects=False)).text
    finally:
        await http.aclose()


async def test_posts_need_the_sessions_csrf_token_and_the_role(
    elicitd: RunningApp, console: Callable[..., Any]
) -> None:
    delivery = await _delivery(elicitd)
    path = f"/console/webhooks/{delivery}/replay"
    async with console(Role.OPERATOR) as operator:
        missing = await operator.http.post(path, data={}, headers={"Origin": elicitd.url})
        assert missing.status_code == 403 and "csrf_failed" in missing.text
        forged = await operator.http.post(path, data={"csrf_token": "x" * 43})
        assert forged.status_code == 403 and "csrf_failed" in forged.text
        other_site = await operator.post(path, headers={"Origin": "https://evil.example"})
        assert other_site.status_code == 403 and "csrf_failed" in other_site.text
    async with console(Role.VIEWER) as viewer:
        refused = await viewer.post(path)
        assert refused.status_code == 403
        assert "Not allowed for your role" in refused.text
    rows = await audit_rows(elicitd, "adminReplayWebhookDelivery")
    refusals = [row for row in rows if row["target"] == f"delivery_id={delivery}"]
    assert [(row["role"], row["status"], row["actor"]) for row in refusals] == [
        ("operator", 403, "console"),
        ("operator", 403, "console"),
        ("operator", 403, "console"),
        ("viewer", 403, "console"),
    ]


async def test_a_console_action_writes_the_api_calls_audit_row(
    elicitd: RunningApp, oauth: OAuthServer, console: Callable[..., Any]
) -> None:
    delivery = await _delivery(elicitd)
    token = await make_token(elicitd, "operator")
    async with admin_http(elicitd, token) as http:
        api = await http.post(f"/admin/v1/webhooks/{delivery}/replay")
    assert api.status_code == 200, api.text
    async with console(Role.OPERATOR) as operator:
        done = await operator.post(f"/console/webhooks/{delivery}/replay")
        assert done.status_code == 303, done.text
    api_row, console_row = await audit_rows(elicitd, "adminReplayWebhookDelivery", target=f"delivery_id={delivery}")
    assert api_row["route"] == "/admin/v1/webhooks/{delivery_id}/replay" and api_row["status"] == 200
    assert_same_audit_row(console_row, api_row, USERS[Role.OPERATOR])
    assert console_row["detail"] == {"operator": {"iss": oauth.issuer, "sub": "otto"}}


async def test_an_admin_change_needs_a_recent_sign_in(
    elicitd: RunningApp, oauth: OAuthServer, console: Callable[..., Any]
) -> None:
    async with console(Role.ADMIN) as admin:
        await age_sessions(elicitd, USERS[Role.ADMIN], seconds=3600)
        stale = await admin.post(
            "/console/clients", {"name": "x"}, headers={"Referer": f"{elicitd.url}/console/clients/new"}
        )
        assert stale.status_code == 403 and "Confirm it is you" in stale.text
        assert "/console/auth/login?fresh=1&amp;return_to=/console/clients/new" in stale.text
        # A page needing a recent sign-in sends the browser to sign in again, with max_age.
        again = await admin.get("/console/auth/login", params={"fresh": "1", "return_to": "/console/clients/new"})
        assert again.status_code == 303
        query = parse_qs(urlsplit(again.headers["location"]).query)
        assert query["max_age"] == ["300"] and query["prompt"] == ["login"]
        callback = oauth.login_without_browser(again.headers["location"], USERS[Role.ADMIN])
        answer = await admin.get(str(callback))
        assert answer.status_code == 200 and "/console/clients/new" in answer.text
        async with elicitd.state.sessions() as session:
            ages = (
                await session.execute(
                    text("SELECT extract(epoch FROM now() - authenticated_at) FROM operator_sessions WHERE sub = 'ada'")
                )
            ).scalars()
            assert min(ages) < 60


async def test_an_idle_session_ends_and_sign_out_ends_it_at_once(
    elicitd: RunningApp, console: Callable[..., Any]
) -> None:
    async with console(Role.OPERATOR) as operator:
        async with elicitd.state.sessions() as session:
            await session.execute(
                text("UPDATE operator_sessions SET last_seen_at = now() - interval '16 minutes' WHERE sub = 'otto'")
            )
            await session.commit()
        idle = await operator.get("/console/")
        assert idle.status_code == 303 and idle.headers["location"].startswith("/console/signin")
    async with console(Role.OPERATOR) as operator:
        refused = await operator.http.post("/console/auth/logout", data={"csrf_token": "nope"})
        assert refused.status_code == 403
        assert (await operator.get("/console/")).status_code == 200
        out = await operator.post("/console/auth/logout")
        assert out.status_code == 200 and "Signed out" in out.text
        assert (await operator.get("/console/")).status_code == 303
