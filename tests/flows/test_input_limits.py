"""Hostile JSON and text on the MCP-server API: each refused with a 4xx problem+json and a stable
code, the flow left exactly as it was (``service.limits``, ``service.text``, ``service.urls``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.flows.schemas import Subject
from service.limits import MAX_JSON_DEPTH, MAX_OBJECT_BYTES, MAX_RESULT_BYTES, json_depth
from tests.flows.helpers import create_external, db_events, db_flow, external_body, resolve_body
from tests.support.apps import RunningApp, ServerClientHandle

PROBLEM = "application/problem+json"


def nested(depth: int) -> Any:
    """An object nested ``depth`` levels deep (a dict of a list of a dict …)."""
    value: Any = 1
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def deep_text(depth: int) -> str:
    """~1,000 levels in two kilobytes: what used to exhaust the decoder's stack."""
    return '{"a":' * depth + "1" + "}" * depth


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth(b"{}") == 1
    assert json_depth(b'{"a": [1, {"b": []}]}') == 4
    assert json_depth(b'{"a": "[[[[{{{{\\"]]]]"}') == 1
    assert json_depth(json.dumps(nested(40)).encode()) > MAX_JSON_DEPTH
    assert json_depth(deep_text(100_000).encode()) == MAX_JSON_DEPTH + 1  # stops counting early


@pytest.mark.parametrize("field", ["context", "params"])
async def test_deep_json_in_a_create_is_400(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, field: str
) -> None:
    body = json.dumps(external_body(subject))[:-1] + f', "{field}": {{"x": {deep_text(1000)}}}}}'
    assert len(body) < 8_000
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "json_too_deep"
    assert response.json()["detail"] == f"JSON may nest objects and arrays at most {MAX_JSON_DEPTH} levels deep."


async def test_depth_at_the_limit_is_accepted_and_one_more_is_not(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        # The body is level 1 and ``context`` level 2: its value may nest 30 more.
        fits = await http.post("/v1/flows", json=external_body(subject, context={"x": nested(MAX_JSON_DEPTH - 2)}))
        over = await http.post("/v1/flows", json=external_body(subject, context={"x": nested(MAX_JSON_DEPTH - 1)}))
    assert fits.status_code == 201, fits.text
    assert over.status_code == 400
    assert over.json()["code"] == "json_too_deep"


async def test_deep_result_leaves_the_flow_pending(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        before = await db_events(elicitd, flow_id)
        response = await http.post(
            f"/v1/flows/{flow_id}/complete",
            content='{"result": {"x": ' + deep_text(1000) + "}}",
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["code"] == "json_too_deep"
        deep_answer = resolve_body(created, subject, "accept")
        deep_answer["input_responses"] = {next(iter(deep_answer["input_responses"])): {"action": "accept"}}
        raw = json.dumps(deep_answer).replace(
            '{"action": "accept"}', '{"action": "accept", "content": ' + deep_text(900) + "}"
        )
        resolved = await http.post("/v1/flows/resolve", content=raw, headers={"Content-Type": "application/json"})
        assert resolved.status_code == 400
        assert resolved.json()["code"] == "json_too_deep"
    row = await db_flow(elicitd, flow_id)
    assert row["status"] == "pending"
    assert row["result"] is None
    assert await db_events(elicitd, flow_id) == before


@pytest.mark.parametrize(("field", "limit"), [("context", MAX_OBJECT_BYTES), ("params", MAX_OBJECT_BYTES)])
async def test_free_form_objects_have_a_size_limit(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, field: str, limit: int
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        fits_body, over_body = external_body(subject), external_body(subject)
        fits_body[field] = {"blob": "x" * (limit - 100)}
        over_body[field] = {"blob": "x" * limit}
        fits = await http.post("/v1/flows", json=fits_body)
        over = await http.post("/v1/flows", json=over_body)
    assert fits.status_code == 201, fits.text
    assert over.status_code == 400
    assert over.json()["code"] == "invalid_request"
    assert f"`{field}` is larger than {limit} bytes" in over.json()["detail"]


async def test_result_has_a_size_limit(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    assert elicitd.settings.max_body_bytes > MAX_RESULT_BYTES
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        over = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"blob": "x" * MAX_RESULT_BYTES}})
        assert over.status_code == 400
        assert "`result` is larger than" in over.json()["detail"]
        assert (await db_flow(elicitd, flow_id))["status"] == "pending"
        fits = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"blob": "x" * 1000}})
        assert fits.status_code == 200


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", None),
        ("application/x-www-form-urlencoded", b"subject=x&kind=external"),
        ("multipart/form-data; boundary=zz", None),
        ("application/xml", b"<flow/>"),
        ("text/json", None),
        (None, None),
    ],
)
async def test_json_routes_refuse_other_media_types_with_415(
    elicitd: RunningApp,
    server_client: ServerClientHandle,
    subject: Subject,
    content_type: str | None,
    body: bytes | None,
) -> None:
    payload = body if body is not None else json.dumps(external_body(subject)).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject, url="https://app.example.com/other")
        flow_id = created["flow"]["id"]
        answers = [
            await http.post("/v1/flows", content=payload, headers=headers),
            await http.post("/v1/flows/resolve", content=payload, headers=headers),
            await http.post(f"/v1/flows/{flow_id}/complete", content=b'{"result": {}}', headers=headers),
            await http.post(f"/v1/flows/{flow_id}/fail", content=b'{"code": "x"}', headers=headers),
        ]
    for response in answers:
        assert response.status_code == 415, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.json()["code"] == "unsupported_media_type"
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/problem+json"]
)
async def test_json_media_types_are_accepted(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, content_type: str
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post(
            "/v1/flows", content=json.dumps(external_body(subject)), headers={"Content-Type": content_type}
        )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"url": "https://app.example.com/step\r\nX-Injected: 1"}, "'url' is not usable"),
        ({"url": "https://app.example.com/\nstep"}, "'url' is not usable"),
        ({"url": "https://exa mple.com/x"}, "'url' is not usable"),
        ({"url": "https://[::1/x"}, "'url' is not usable"),
        ({"url": "https://app.example.com:99999/x"}, "'url' is not usable"),
        ({"message": "Approve\u2028the transfer"}, "`message`"),
        ({"message": "Approve\u2029the transfer"}, "`message`"),
        ({"message": "Pay \u202eevil\u202c now"}, "`message`"),
        ({"message": "Pay \u061cnow"}, "`message`"),
        ({"message": "Pay\u200b now"}, "`message`"),
        ({"message": "Pay\ufeff now"}, "`message`"),
        ({"message": "Pay\x85 now"}, "`message`"),
        ({"message": "Pay\r now"}, "`message`"),
        ({"message": "Pay\x1b[31m now"}, "`message`"),
        ({"account": "work\naccount"}, "`account`"),
        ({"subject": {"iss": "https://id.example.com", "sub": "alice\u200d"}}, "`sub`"),
    ],
)
async def test_control_and_format_characters_are_refused(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject, extra: dict[str, Any], fragment: str
) -> None:
    body = external_body(subject)
    body.update(extra)
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "invalid_request"
    assert fragment in response.json()["detail"]
    assert "\r" not in response.text and "\u2028" not in response.json()["detail"]


async def test_line_breaks_and_tabs_are_text_in_a_message(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post(
            "/v1/flows", json=external_body(subject, message="Connect your account.\n\tIt takes a minute. ✓ 日本")
        )
    assert response.status_code == 201, response.text
    assert (
        response.json()["mcp"]["inputRequests"][f"elicitd_{response.json()['flow']['id']}"]["params"]["message"]
        == "Connect your account.\n\tIt takes a minute. ✓ 日本"
    )


async def test_a_fail_message_keeps_the_text_rule(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        response = await http.post(f"/v1/flows/{flow_id}/fail", json={"code": "nope", "message": "bad\u202etext"})
    assert response.status_code == 400
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"
