"""Bad input gets a clear problem+json with a stable code, never a 500, and changes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from service.flows.schemas import Subject
from tests.flows.helpers import create_external, db_flow, external_body, resolve_body, subject_json
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client

PROBLEM = "application/problem+json"


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer x", "Basic abc", "Bearer elk_nope", "Bearer elk_" + "x" * 300, "Bearer not-a-key"],
)
async def test_missing_or_wrong_api_key_is_401_without_detail(
    elicitd: RunningApp, subject: Subject, header: str | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    async with elicitd.http() as http:
        response = await http.post("/v1/flows", json=external_body(subject), headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {
        "type": "https://elicitd.dev/problems/unauthenticated",
        "title": "Authentication required",
        "status": 401,
        "code": "unauthenticated",
        "detail": "A valid API key is required.",
    }


async def test_revoked_key_and_disabled_client_are_401(elicitd: RunningApp, subject: Subject) -> None:
    from sqlalchemy import text

    revoked = await new_server_client(elicitd)
    disabled = await new_server_client(elicitd)
    async with elicitd.state.sessions() as session:
        await session.execute(
            text("UPDATE server_client_keys SET revoked_at = now() WHERE server_client_id = :c"), {"c": revoked.id}
        )
        await session.execute(text("UPDATE server_clients SET disabled = true WHERE id = :c"), {"c": disabled.id})
        await session.commit()
    for handle in (revoked, disabled):
        async with elicitd.http(handle.api_key) as http:
            response = await http.post("/v1/flows", json=external_body(subject))
        assert response.status_code == 401
        assert response.json()["detail"] == "A valid API key is required."


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", None),
        (b"", None),
        (b"[]", None),
        (
            b'{"subject": {"iss": "https://i", "sub": "u"}, "kind": "external", "url": "https://a.example/x", "zzz": 1}',
            "unknown field `zzz`",
        ),
        (b'{"subject": {"iss": "https://i", "sub": "u", "name": "x"}, "kind": "external"}', "unknown field `name`"),
        (b'{"subject": {"iss": "https://i"}, "kind": "external"}', "sub"),
        (b'{"subject": {"iss": "https://i", "sub": ""}, "kind": "external"}', None),
        (b'{"subject": {"iss": "https://i", "sub": "u"}, "kind": "teleport"}', None),
        (b'{"subject": {"iss": "https://i", "sub": "u"}, "kind": "external", "ttl_seconds": 1}', None),
        (b'{"subject": {"iss": "https://i", "sub": "u"}, "kind": "external", "ttl_seconds": "x"}', None),
        (b'{"subject": {"iss": "https://i", "sub": "u"}, "kind": "external", "scopes": ["a b"]}', None),
    ],
)
async def test_malformed_create_is_400(
    elicitd: RunningApp, server_client: ServerClientHandle, body: bytes, fragment: str | None
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "invalid_request"
    if fragment:
        assert fragment in response.json()["detail"]


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"url": None}, "invalid_request"),
        ({"url": "ftp://files.example.com/x"}, "invalid_request"),
        ({"url": "http://app.example.com/x"}, "invalid_request"),
        ({"url": "https://user:pw@app.example.com/x"}, "invalid_request"),
        ({"ttl_seconds": 10**8}, "invalid_request"),
    ],
)
async def test_invalid_external_requests(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, extra: dict[str, object], code: str
) -> None:
    body = external_body(subject)
    body.update(extra)
    if body["url"] is None:
        del body["url"]
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == code


async def test_loopback_http_url_is_allowed(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=external_body(subject, url="http://127.0.0.1:9000/step"))
    assert response.status_code == 201


async def test_oversized_body_is_413(elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject) -> None:
    body = external_body(subject, context={"blob": "x" * (elicitd.settings.max_body_bytes + 10)})
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 413
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "payload_too_large"


async def db_flows_of(app: RunningApp, subject: Subject) -> int:
    async with app.state.sessions() as session:
        query = text("SELECT count(*) FROM flows WHERE subject_iss = :iss AND subject_sub = :sub")
        return int((await session.execute(query, {"iss": subject.iss, "sub": subject.sub})).scalar_one())


async def _pieces(payload: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(payload), size):
        yield payload[start : start + size]


async def test_a_streamed_body_over_the_limit_is_413_and_creates_nothing(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    """No Content-Length to refuse early (chunked transfer): the bytes streamed are counted."""
    limit = elicitd.settings.max_body_bytes
    payload = json.dumps(external_body(subject, context={"blob": "x" * (limit + 10)})).encode()
    headers = {"Content-Type": "application/json"}
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", content=_pieces(payload, 4096), headers=headers)
        assert response.request.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in response.request.headers
        assert response.status_code == 413
        assert response.json()["code"] == "payload_too_large"
    assert await db_flows_of(elicitd, subject) == 0


async def test_a_body_in_many_pieces_is_read_whole(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    payload = json.dumps(external_body(subject, context={"note": "y" * 3000})).encode()
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post(
            "/v1/flows", content=_pieces(payload, 100), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 201, response.text
    assert response.json()["flow"]["status"] == "pending"
    assert await db_flows_of(elicitd, subject) == 1


@pytest.mark.parametrize(
    "flow_ref",
    [
        "nope",
        "fl_",
        "fl_zz",
        "fl_" + "g" * 32,
        "fl_" + "0" * 31,
        "fl_" + "0" * 32,
        "sc_" + "0" * 32,
        "%00",
        "fl_" + "A" * 32,
    ],
)
async def test_bad_or_unknown_flow_ids_are_404(
    elicitd: RunningApp, server_client: ServerClientHandle, flow_ref: str
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        status = await http.get(f"/v1/flows/{flow_ref}")
        complete = await http.post(f"/v1/flows/{flow_ref}/complete", json={"result": {}})
    for response in (status, complete):
        assert response.status_code == 404
        assert response.json()["code"] == "flow_not_found"


async def test_bad_wait_and_fail_bodies_are_400(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        assert (await http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": -1})).status_code == 400
        assert (await http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": "soon"})).status_code == 400
        bad_code = await http.post(f"/v1/flows/{flow_id}/fail", json={"code": "Not A Code"})
        assert bad_code.status_code == 400
        no_result = await http.post(f"/v1/flows/{flow_id}/complete", json={})
        assert no_result.status_code == 400
        wrong_method = await http.delete(f"/v1/flows/{flow_id}")
        assert wrong_method.status_code == 405
        assert wrong_method.json()["code"] == "method_not_allowed"
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"


@pytest.mark.parametrize("mangle", ["tamper", "other_subject", "other_issuer", "expired", "garbage", "empty_key"])
async def test_bad_request_state_is_rejected_and_changes_nothing(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, mangle: str
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        body = resolve_body(created, subject, "decline")
        state = body["request_state"]
        expected = "invalid_request_state"
        if mangle == "tamper":
            body["request_state"] = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        elif mangle == "other_subject":
            body["subject"] = subject_json(Subject(iss=subject.iss, sub="mallory"))
        elif mangle == "other_issuer":
            body["subject"] = subject_json(Subject(iss="https://evil.example", sub=subject.sub))
        elif mangle == "expired":
            flow_uuid = __import__("uuid").UUID(hex=flow_id.removeprefix("fl_"))
            body["request_state"] = elicitd.state.flows.codec.mint(
                flow_id=flow_uuid, server_client_id=server_client.id, subject=subject, expires_at=1, asked=True
            )
            expected = "request_state_expired"
        elif mangle == "garbage":
            body["request_state"] = "v1.test2.!!!"
        elif mangle == "empty_key":
            body["request_state"] = "v1..abc"
        response = await http.post("/v1/flows/resolve", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == expected
    assert state not in response.text
    row = await db_flow(elicitd, flow_id)
    assert row["status"] == "pending"


async def test_request_state_from_another_server_client_is_rejected(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    other = await new_server_client(elicitd)
    async with elicitd.http(server_client.api_key) as http, elicitd.http(other.api_key) as other_http:
        created = await create_external(http, subject)
        response = await other_http.post("/v1/flows/resolve", json=resolve_body(created, subject, "decline"))
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request_state"
    assert (await db_flow(elicitd, created["flow"]["id"]))["status"] == "pending"


async def test_unknown_route_is_problem_json(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        response = await http.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("where", ["sub", "message", "url", "context", "params"])
async def test_nul_characters_are_400_and_store_nothing(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, where: str
) -> None:
    body = external_body(subject)
    if where == "sub":
        body["subject"]["sub"] = "alice\x00"
    elif where == "message":
        body["message"] = "hello\x00"
    elif where == "url":
        body["url"] = "https://app.example.com/\x00"
    elif where == "context":
        body["context"] = {"nested": ["ok", {"bad": "a\x00b"}]}
    else:
        body["params"] = {"k\x00": 1}
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "invalid_request"
    from sqlalchemy import text

    async with elicitd.state.sessions() as session:
        count = (
            await session.execute(
                text("SELECT count(*) FROM flows WHERE server_client_id = :c"), {"c": server_client.id}
            )
        ).scalar_one()
    assert count == 0


async def test_nul_in_complete_and_fail_is_400_and_flow_stays_pending(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        complete = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"a": "\x00"}})
        fail = await http.post(f"/v1/flows/{flow_id}/fail", json={"code": "x", "message": "bad\x00"})
    assert (complete.status_code, complete.json()["code"]) == (400, "invalid_request")
    assert (fail.status_code, fail.json()["code"]) == (400, "invalid_request")
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"


@pytest.mark.parametrize("url", ["https://[::1/x", "https://a.example:99999/x", "https://a.example:port/x"])
async def test_unparseable_external_urls_are_400(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, url: str
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=external_body(subject, url=url))
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


@pytest.mark.parametrize(
    "params",
    [
        {"iss": "https://i\x00", "sub": "u"},
        {"iss": "https://i", "sub": "u\x00"},
        {"iss": "https://i", "sub": "u", "account": "a\x00"},
    ],
)
async def test_nul_in_connection_queries_is_400(
    elicitd: RunningApp, server_client: ServerClientHandle, params: dict[str, str]
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        token = await http.get("/v1/connections/github/token", params=params)
        revoke = await http.delete("/v1/connections/github", params=params)
    for response in (token, revoke):
        assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
