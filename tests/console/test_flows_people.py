"""The console's Flows and People pages over httpx: search and its filters, keyset pages, a flow's
history, Cancel and Expire, a person's overview, Refresh, Revoke and Reconnect link — each action
leaving the audit row its admin API call leaves, and each refused to a viewer."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx

from service.admin.tokens import Role
from tests.admin.conftest import PROVIDER_CLIENT, admin_http, make_provider, make_token
from tests.console.conftest import assert_same_audit_row, audit_rows
from tests.support.apps import RunningApp, new_server_client
from tests.support.factories import grant_connection, plant_connection
from tests.support.oauth_server import OAuthServer

_FLOW_LINK = re.compile(r'href="/console/flows/(fl_[A-Za-z0-9_-]+)"')
_POST_FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"')


def flow_ids(page: httpx.Response) -> list[str]:
    """The flows a search page lists, in its order (each row links its flow once)."""
    return list(dict.fromkeys(_FLOW_LINK.findall(page.text)))


def post_forms(page: httpx.Response) -> list[str]:
    return [action for action in _POST_FORM.findall(page.text) if action != "/console/auth/logout"]


async def new_flow(app: RunningApp, api_key: str, iss: str, sub: str) -> str:
    body = {
        "subject": {"iss": iss, "sub": sub},
        "kind": "external",
        "url": f"https://app.example.com/step/{uuid.uuid4().hex[:8]}",
    }
    async with app.http(api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["flow"]["id"])


async def test_search_filters_and_pages(elicitd: RunningApp, oauth: OAuthServer, console: Any) -> None:
    client = await new_server_client(elicitd)
    sub = f"alice-{uuid.uuid4().hex[:6]}"
    made = [await new_flow(elicitd, client.api_key, oauth.issuer, sub) for _ in range(6)]
    pending, completed, failed = made[:2], made[2:5], made[5:]
    async with elicitd.http(client.api_key) as http:
        for flow in completed:
            assert (await http.post(f"/v1/flows/{flow}/complete", json={"result": {"ok": True}})).status_code == 200
        answer = await http.post(f"/v1/flows/{failed[0]}/fail", json={"code": "upstream_denied"})
        assert answer.status_code == 200
    newest_first = list(reversed(made))
    who = {"iss": oauth.issuer, "sub": sub}
    async with console(Role.VIEWER) as viewer:
        found = await viewer.get("/console/flows", params=who)
        waiting = await viewer.get("/console/flows", params={**who, "state": "pending"})
        by_name = await viewer.get("/console/flows", params={"server_client": client.name, "state": "completed"})
        consent = await viewer.get("/console/flows", params={**who, "kind": "consent"})
        any_time = await viewer.get("/console/flows", params={**who, "window": "all", "state": "failed"})
        last_hour = await viewer.get("/console/flows", params={**who, "window": "1h", "kind": "external"})
        no_client = await viewer.get("/console/flows", params={"server_client": "no-such-client"})
        half = await viewer.get("/console/flows", params={"sub": sub})
        seen: list[str] = []
        page = await viewer.get("/console/flows", params={**who, "limit": 4})
        while True:
            assert page.status_code == 200, page.text
            seen.extend(flow_ids(page))
            link = re.search(r'href="([^"]+)" rel="next"', page.text)
            if link is None:
                break
            page = await viewer.get(link.group(1).replace("&amp;", "&"))
    assert found.status_code == 200, found.text
    assert flow_ids(found) == newest_first
    assert flow_ids(waiting) == list(reversed(pending))
    assert flow_ids(by_name) == list(reversed(completed))
    assert (consent.status_code, flow_ids(consent)) == (200, [])
    assert 'id="no-flows"' in consent.text
    assert flow_ids(any_time) == failed and "<code>upstream_denied</code>" in any_time.text
    assert flow_ids(last_hour) == newest_first
    assert no_client.status_code == 404 and 'id="error"' in no_client.text
    assert half.status_code == 400 and "subject_sub needs subject_iss" in half.text
    assert seen == newest_first  # 4 + 2 over two pages, each once
    assert post_forms(found) == []


async def test_a_flow_page_cancel_and_expire_leave_the_apis_audit_rows(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    client = await new_server_client(elicitd)
    sub = f"bob-{uuid.uuid4().hex[:6]}"
    api_cancelled, api_expired, cancelled, expired = [
        await new_flow(elicitd, client.api_key, oauth.issuer, sub) for _ in range(4)
    ]
    token = await make_token(elicitd, "operator")
    async with admin_http(elicitd, token) as http:
        assert (await http.post(f"/admin/v1/flows/{api_cancelled}/cancel")).status_code == 200
        assert (await http.post(f"/admin/v1/flows/{api_expired}/expire")).status_code == 200
        assert (await http.post(f"/admin/v1/flows/{api_cancelled}/cancel")).status_code == 409

    async with console(Role.VIEWER) as viewer:
        shown = await viewer.get(f"/console/flows/{cancelled}")
        refused = await viewer.post(f"/console/flows/{cancelled}/cancel")
    assert shown.status_code == 200
    assert post_forms(shown) == []
    assert refused.status_code == 403
    async with console(Role.OPERATOR) as operator:
        page = await operator.get(f"/console/flows/{cancelled}")
        assert post_forms(page) == [f"/console/flows/{cancelled}/cancel", f"/console/flows/{cancelled}/expire"]
        done = await operator.post(f"/console/flows/{cancelled}/cancel")
        gone = await operator.post(f"/console/flows/{expired}/expire")
        again = await operator.post(f"/console/flows/{cancelled}/cancel")
        after = await operator.get(done.headers["location"])
        missing = await operator.post("/console/flows/fl_nothing/cancel")
    assert (done.status_code, done.headers["location"]) == (303, f"/console/flows/{cancelled}?done=cancelled")
    assert gone.status_code == 303
    assert again.status_code == 409 and "already finished" in again.text
    assert again.headers["content-type"].startswith("text/html")
    assert missing.status_code == 404
    assert 'id="notice"' in after.text and post_forms(after) == []
    history = after.text[after.text.index('id="history"') :]
    assert "Pending → Cancelled" in history and "<td>Operator</td>" in history and f"otto at {oauth.issuer}" in history

    for operation, api_flow, console_flow in (
        ("adminCancelFlow", api_cancelled, cancelled),
        ("adminExpireFlow", api_expired, expired),
    ):
        rows = await audit_rows(elicitd, operation)
        api_rows = [r for r in rows if r["target"] == f"flow_id={api_flow}"]
        console_rows = [r for r in rows if r["target"] == f"flow_id={console_flow}" and r["actor"] == "console"]
        ok = [r for r in console_rows if r["role"] == "operator"]
        assert [r["status"] for r in api_rows] == ([200, 409] if operation == "adminCancelFlow" else [200])
        assert [r["status"] for r in ok] == ([200, 409] if operation == "adminCancelFlow" else [200])
        for console_row, api_row in zip(ok, api_rows, strict=True):
            # The same row but for the flow acted on (the API acted on its own flow of the pair).
            assert_same_audit_row(console_row, {**api_row, "target": f"flow_id={console_flow}"}, "otto")
    viewer_rows = [r for r in await audit_rows(elicitd, "adminCancelFlow") if r["role"] == "viewer"]
    assert [r["status"] for r in viewer_rows if r["target"] == f"flow_id={cancelled}"] == [403]


async def _broken_connection(elicitd: RunningApp, oauth: OAuthServer, sub: str, client: Any) -> tuple[str, str]:
    """A connection of ``sub`` granted to ``client`` whose refresh the provider refuses next."""
    provider = await make_provider(elicitd, oauth)
    connection, minted = await plant_connection(
        elicitd, oauth, provider, iss=oauth.issuer, sub=sub, login=sub, client_id=PROVIDER_CLIENT
    )
    await grant_connection(elicitd, connection, client.id, ["files:read"])
    return connection, str(minted["refresh_token"])


async def test_the_people_page_says_why_a_tool_fails_and_acts_like_the_api(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    client = await new_server_client(elicitd, display_name="Files Assistant")
    sub, other = f"carol-{uuid.uuid4().hex[:6]}", f"dave-{uuid.uuid4().hex[:6]}"
    connection, refresh_secret = await _broken_connection(elicitd, oauth, sub, client)
    api_connection, _ = await _broken_connection(elicitd, oauth, other, client)
    failed = await new_flow(elicitd, client.api_key, oauth.issuer, sub)
    async with elicitd.http(client.api_key) as http:
        answer = await http.post(f"/v1/flows/{failed}/fail", json={"code": "upstream_denied", "message": "No."})
    assert answer.status_code == 200

    token = await make_token(elicitd, "operator")
    oauth.fail_next_refresh("invalid_grant")
    async with admin_http(elicitd, token) as http:
        assert (await http.post(f"/admin/v1/connections/{api_connection}/refresh")).status_code == 409
        assert (await http.post(f"/admin/v1/connections/{api_connection}/reconnect-link")).status_code == 200
        assert (await http.post(f"/admin/v1/connections/{api_connection}/revoke")).status_code == 200

    who = {"iss": oauth.issuer, "sub": sub}
    async with console(Role.VIEWER) as viewer:
        landing_before = await viewer.get("/console/people")
        refused = await viewer.post(f"/console/people/connections/{connection}/revoke")
    assert refused.status_code == 403
    async with console(Role.OPERATOR) as operator:
        oauth.fail_next_refresh("invalid_grant")
        refresh = await operator.post(f"/console/people/connections/{connection}/refresh")
        link = await operator.post(f"/console/people/connections/{connection}/reconnect-link")
    async with console(Role.VIEWER) as viewer:
        person = await viewer.get("/console/people", params=who)
        through = await viewer.get("/console/people", params={**who, "server_client": client.public_id})
        landing = await viewer.get("/console/people")
    assert refresh.status_code == 409 and "the person must reconnect" in refresh.text
    assert link.status_code == 200
    for answered in (refresh, link):  # a page answering a POST is a page, not JSON
        assert answered.headers["content-type"].startswith("text/html")
    url = re.search(r'id="reconnect-url">([^<]+)<', link.text)
    assert url is not None and url.group(1).startswith(elicitd.url)

    # "Why did carol's tool call fail?": the page answers, most decisive first, with the reasons.
    assert person.status_code == 200, person.text
    assert post_forms(person) == []
    codes = re.findall(r'data-code="([a-z_]+)"', person.text)
    # The reconnect link's flow is the newest: it waits for carol, after the failed one.
    assert codes == ["reauthorization_required", "flow_pending"]
    assert "Needs reauthorization" in person.text and "<code>invalid_grant</code>" in person.text
    assert failed in person.text and "<code>upstream_denied</code>" in person.text
    assert "Files Assistant" in person.text and "files:read" in person.text
    assert re.findall(r'data-code="([a-z_]+)"', through.text) == ["reauthorization_required", "flow_pending"]
    # Without a person named, the page lists those whose connection needs reauthorization: carol now.
    assert f'<bdi dir="ltr">{sub}</bdi>' in landing.text
    assert f'<bdi dir="ltr">{sub}</bdi>' not in landing_before.text
    for page in (person, through, landing, link):
        assert refresh_secret not in page.text and client.api_key not in page.text

    async with console(Role.OPERATOR) as operator:
        revoke = await operator.post(f"/console/people/connections/{connection}/revoke")
        revoked = await operator.get(revoke.headers["location"])
    assert revoke.status_code == 303 and "done=revoked" in revoke.headers["location"]
    assert 'data-code="connection_revoked"' in revoked.text
    assert post_forms(revoked) == []  # nothing left to act on

    for operation, expected in (
        # The refusal marked the connection's health (a change): its row, then the correction to 409.
        ("adminRefreshConnection", [200, 409]),
        ("adminReconnectLink", [200]),
        ("adminRevokeConnection", [200]),
    ):
        rows = await audit_rows(elicitd, operation)
        api_rows = [r for r in rows if r["target"] == f"connection_id={api_connection}"]
        mine = [r for r in rows if r["target"] == f"connection_id={connection}" and r["role"] == "operator"]
        assert [r["status"] for r in api_rows] == expected
        assert [r["status"] for r in mine] == expected
        for console_row, api_row in zip(mine, api_rows, strict=True):
            assert_same_audit_row(console_row, {**api_row, "target": f"connection_id={connection}"}, "otto")
    viewer_rows = [r for r in await audit_rows(elicitd, "adminRevokeConnection") if r["role"] == "viewer"]
    assert [r["status"] for r in viewer_rows if r["target"] == f"connection_id={connection}"] == [403]
