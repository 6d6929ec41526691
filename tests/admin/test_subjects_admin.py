"""One subject's overview (``GET /admin/v1/subjects``) and a flow's result shape: what an operator
reads to answer "why did this person's tool call fail?", with no secret on the way."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tests.admin.conftest import PROVIDER_CLIENT, Token, admin_http, complete_flow, create_flow, make_provider
from tests.support.apps import RunningApp, new_server_client
from tests.support.factories import grant_connection, plant_connection
from tests.support.oauth_server import OAuthServer

PLANTED = "planted-result-secret-6f1d"


async def test_a_subject_shows_why_a_tool_fails(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    provider = await make_provider(elicitd, oauth)
    client = await new_server_client(elicitd)
    sub = f"u{uuid.uuid4().hex[:10]}"
    connection, minted = await plant_connection(
        elicitd, oauth, provider, iss=oauth.issuer, sub=sub, login=sub, client_id=PROVIDER_CLIENT
    )
    await grant_connection(elicitd, connection, client.id, ["files:read"])
    done = await create_flow(elicitd, client, sub=sub, iss=oauth.issuer)
    assert (await complete_flow(elicitd, client, done)).status_code == 200
    failed = await create_flow(elicitd, client, sub=sub, iss=oauth.issuer)
    async with elicitd.http(client.api_key) as http:
        response = await http.post(
            f"/v1/flows/{failed}/fail", json={"code": "upstream_denied", "message": "The upstream said no."}
        )
    assert response.status_code == 200, response.text
    receipt_id = uuid.uuid4().hex
    async with elicitd.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO consent_receipts (id, flow_id, server_client_id, subject_iss, subject_sub,"
                " text_sha256, key_id, receipt) VALUES (:id, :f, :c, :iss, :sub, :h, 'key-1', :signed)"
            ),
            {
                "id": receipt_id,
                "f": uuid.UUID(done[3:]),
                "c": client.id,
                "iss": oauth.issuer,
                "sub": sub,
                "h": "ab" * 32,
                "signed": f"eyJ.{PLANTED}.sig",
            },
        )
        await session.commit()
    oauth.fail_next_refresh("invalid_grant")
    async with admin_http(elicitd, tokens["operator"]) as http:
        refused = await http.post(f"/admin/v1/connections/{connection}/refresh")
    assert refused.status_code == 409, refused.text

    async with admin_http(elicitd, tokens["viewer"]) as http:
        response = await http.get("/admin/v1/subjects", params={"iss": oauth.issuer, "sub": sub})
        unknown = await http.get("/admin/v1/subjects", params={"iss": oauth.issuer, "sub": "nobody-here"})
        half = await http.get("/admin/v1/subjects", params={"iss": oauth.issuer})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["subject"] == {"iss": oauth.issuer, "sub": sub}
    (item,) = body["connections"]
    assert item["connection"]["id"] == connection
    assert (item["connection"]["health"], item["connection"]["health_reason"]) == (
        "needs_reauthorization",
        "invalid_grant",
    )
    assert [a["scopes"] for a in item["connection"]["authorizations"]] == [["files:read"]]
    assert [(g["grantee"]["id"], g["scopes"]) for g in item["grants"]] == [(client.public_id, ["files:read"])]
    assert item["last_used_at"] is None
    assert [(f["id"], f["status"], f["error_code"]) for f in body["recent_flows"]] == [
        (failed, "failed", "upstream_denied"),
        (done, "completed", None),
    ]
    assert body["consent_receipts"] == [
        {
            "id": receipt_id,
            "flow_id": done,
            "server_client": client.public_id,
            "text_sha256": "ab" * 32,
            "key_id": "key-1",
            "issued_at": body["consent_receipts"][0]["issued_at"],
        }
    ]
    assert [(f["code"], f.get("connection_id"), f.get("flow_id")) for f in body["findings"]] == [
        ("reauthorization_required", connection, None),
        ("last_flow_failed", None, failed),
    ]
    for secret in (PLANTED, minted["access_token"], minted["refresh_token"], client.api_key):
        assert secret not in response.text
    assert unknown.status_code == 200
    assert [f["code"] for f in unknown.json()["findings"]] == ["not_connected"]
    assert half.status_code == 400


async def test_a_flow_shows_its_result_shape_never_its_values(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    flow = await create_flow(elicitd, client)
    pending = await create_flow(elicitd, client)
    result = {"token": PLANTED, "count": 3, "ok": True, "items": [{"name": PLANTED, "none": None}], "empty": []}
    assert (await complete_flow(elicitd, client, flow, result)).status_code == 200
    async with admin_http(elicitd, tokens["viewer"]) as http:
        shown = await http.get(f"/admin/v1/flows/{flow}")
        waiting = await http.get(f"/admin/v1/flows/{pending}")
    assert shown.status_code == 200, shown.text
    assert shown.json()["result_shape"] == {
        "count": "number",
        "empty": [],
        "items": [{"name": "string", "none": "null"}],
        "ok": "boolean",
        "token": "string",
    }
    assert PLANTED not in shown.text
    assert waiting.json()["result_shape"] is None
