"""Structured log lines: exact fields per request and per transition, and redaction of what
third-party libraries write (their messages are free text we do not control)."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from sqlalchemy import text

from service.logs import redact_foreign
from service.settings import Settings
from tests.support.apps import LogCapture, new_server_client, running_app

MARKERS = (
    "MARK-CODE-1",
    "MARK-STATE-2",
    "MARK-TOKEN-3",
    "MARK-RT-4",
    "MARK-CS-5",
    "MARK-PW-6",
    "MARK-KEY-7",
    "MARK-FRAG-8",
    "MARK-BEARER-9",
    "MARK-SECRET-10",
)


@contextlib.contextmanager
def captured(*levels: tuple[str, int]) -> Iterator[LogCapture]:
    """A LogCapture on the root logger, with the named loggers (and root) set to the given levels."""
    capture = LogCapture()
    root = logging.getLogger()
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name, _ in levels]
    saved.append((root, root.level))
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    for name, level in levels:
        logging.getLogger(name).setLevel(level)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        for logger, level in saved:
            logger.setLevel(level)


def timed(line: dict[str, Any]) -> dict[str, Any]:
    """The line without its timestamp and request duration (checked for shape, not value)."""
    line = dict(line)
    line.pop("ts")
    duration = line.pop("duration_ms")
    assert isinstance(duration, float)
    assert duration > 0
    return line


async def test_request_and_transition_lines_name_the_flow(make_settings: Callable[..., Settings]) -> None:
    with captured() as capture:
        async with running_app(make_settings()) as app:
            client = await new_server_client(app)
            subject = {"iss": "https://id.example.com", "sub": f"u-{uuid.uuid4().hex[:8]}"}
            async with app.http(client.api_key) as http:
                created = await http.post(
                    "/v1/flows", json={"subject": subject, "kind": "external", "url": "https://app.example.com/step"}
                )
                assert created.status_code == 201, created.text
                body = created.json()
                flow_id = body["flow"]["id"]
                completed = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
                assert completed.status_code == 200
                key = next(iter(body["mcp"]["inputRequests"]))
                resolved = await http.post(
                    "/v1/flows/resolve",
                    json={
                        "subject": subject,
                        "request_state": body["mcp"]["requestState"],
                        "input_responses": {key: {"action": "accept"}},
                    },
                )
                assert resolved.json()["outcome"] == "completed"
                assert (await http.get("/healthz")).status_code == 200
            async with app.state.sessions() as session:
                created_at, completed_at = (
                    await session.execute(
                        text("SELECT created_at, completed_at FROM flows WHERE id = :i"), {"i": uuid.UUID(flow_id[3:])}
                    )
                ).one()
    lines = [json.loads(line) for line in capture.lines]
    requests = [timed(line) for line in lines if line["logger"] == "elicitd.requests"]
    about_flow = {"flow_id": flow_id, "server_client": client.public_id, "kind": "external"}
    base = {"level": "info", "logger": "elicitd.requests", "msg": "request"}
    assert requests == [
        {**base, **about_flow, "outcome": "created", "method": "POST", "route": "/v1/flows", "status": 201},
        {
            **base,
            **about_flow,
            "outcome": "completed",
            "method": "POST",
            "route": "/v1/flows/{flow_id}/complete",
            "status": 200,
        },
        {**base, **about_flow, "outcome": "completed", "method": "POST", "route": "/v1/flows/resolve", "status": 200},
        {**base, "method": "GET", "route": "/healthz", "status": 200},
    ]
    # Other instances' sweepers may expire other tests' flows meanwhile: keep this client's lines.
    transitions = [
        line for line in lines if line["logger"] == "elicitd.flows" and line.get("server_client") == client.public_id
    ]
    for line in transitions:
        line.pop("ts")
    expected_ms = round((completed_at - created_at).total_seconds() * 1000, 1)
    assert expected_ms > 0
    assert transitions == [
        {
            "level": "info",
            "logger": "elicitd.flows",
            "msg": "flow transition",
            **about_flow,
            "outcome": "completed",
            "duration_ms": expected_ms,
        }
    ]
    # The request state, the result and the subject never reach a line.
    joined = "\n".join(capture.lines)
    assert body["mcp"]["requestState"] not in joined
    assert subject["sub"] not in joined


async def test_a_sweep_batch_is_one_line_with_its_count(make_settings: Callable[..., Settings]) -> None:
    """Expiries by the sweeper: one ``flows expired`` line per batch and no line per flow at INFO;
    with DEBUG on, each flow's ``flow transition`` line too, at DEBUG."""
    async with running_app(make_settings(background_tasks=False)) as app:
        flows = app.state.flows
        while await flows.sweep_once():  # whatever earlier tests left due
            pass
        client = await new_server_client(app)

        async def due(count: int) -> None:
            async with app.http(client.api_key) as http:
                for _ in range(count):
                    subject = {"iss": "https://id.example.com", "sub": f"sweep-{uuid.uuid4().hex[:8]}"}
                    created = await http.post(
                        "/v1/flows",
                        json={"subject": subject, "kind": "external", "url": "https://app.example.com/step"},
                    )
                    assert created.status_code == 201, created.text
            async with app.state.sessions() as session:
                await session.execute(
                    text(
                        "UPDATE flows SET expires_at = now() - interval '1 second'"
                        " WHERE server_client_id = :c AND status = 'pending'"
                    ),
                    {"c": client.id},
                )
                await session.commit()

        await due(4)
        with captured() as quiet:
            assert await flows.sweep_once() == 4
        await due(2)
        with captured(("elicitd.flows", logging.DEBUG)) as verbose:
            assert await flows.sweep_once() == 2

    def ours(capture: LogCapture) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in capture.lines]
        lines = [line for line in lines if line["logger"] == "elicitd.flows"]
        for line in lines:
            line.pop("ts")
            line.pop("flow_id", None)
            line.pop("duration_ms", None)
        return lines

    summary = {"logger": "elicitd.flows", "msg": "flows expired", "level": "info"}
    assert ours(quiet) == [{**summary, "count": 4}]
    each = {
        "level": "debug",
        "logger": "elicitd.flows",
        "msg": "flow transition",
        "kind": "external",
        "outcome": "expired",
        "server_client": client.public_id,
    }
    assert ours(verbose) == [each, each, {**summary, "count": 2}]


def test_third_party_messages_are_redacted() -> None:
    planted = [
        (
            "httpx",
            'HTTP Request: %s %s "%s"',
            ("GET", "https://files.example.com/cb?code=MARK-CODE-1&state=MARK-STATE-2", "HTTP/1.1 400 Bad Request"),
        ),
        (
            "authlib.integrations",
            "provider answered %s",
            ('{"access_token": "MARK-TOKEN-3", "refresh_token": "MARK-RT-4", "token_type": "Bearer"}',),
        ),
        ("stripe", "request failed client_secret=MARK-CS-5 password=MARK-PW-6 api_key=MARK-KEY-7", ()),
        ("uvicorn.error", "redirect to %s", ("https://app.example.com/done#access_token=MARK-FRAG-8",)),
        ("httpcore.http11", "send headers Authorization: Bearer MARK-BEARER-9; secret: MARK-SECRET-10", ()),
    ]
    with captured(*((name, logging.WARNING) for name, _, _ in planted)) as capture:
        for name, message, args in planted:
            logging.getLogger(name).warning(message, *args)
        # Our own messages are constant strings and pass as they are.
        logging.getLogger("elicitd.flows").warning("key=value stays: %s", "https://elicitd.example.com/f?x=1")
    assert len(capture.lines) == 6
    assert not any(marker in line for line in capture.lines for marker in MARKERS)
    assert [json.loads(line)["msg"] for line in capture.lines] == [
        'HTTP Request: GET https://files.example.com/cb?[redacted] "HTTP/1.1 400 Bad Request"',
        'provider answered {"access_token": "[redacted]", "refresh_token": "[redacted]", "token_type": "Bearer"}',
        "request failed client_secret=[redacted] password=[redacted] api_key=[redacted]",
        "redirect to https://app.example.com/done?[redacted]",
        "send headers Authorization: Bearer [redacted]; secret: [redacted]",
        "key=value stays: https://elicitd.example.com/f?x=1",
    ]


def test_the_redactor_takes_credentials_after_a_scheme_not_words() -> None:
    """``Bearer``/``Basic``/``Token`` followed by a credential loses it; followed by prose, nothing."""
    prose = [
        "refresh failed (the token vault) for connection 7",
        "Providers, OAuth states and connections (the token vault).",
        "Token expired, asking again",
        "Basic information about the provider",
        "The Bearer Authentication scheme",
    ]
    assert [redact_foreign(line) for line in prose] == prose
    credentials = {
        "Authorization: Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln": "Authorization: Bearer [redacted]",
        "Basic YWxhZGRpbjpvcGVuc2VzYW1l sent": "Basic [redacted] sent",
        "token ghp_16C7e42F292c6912E7710c838347Ae178B4a": "token [redacted]",
        "Bearer elk_ff49d08f_AQoEoG": "Bearer [redacted]",
        "Bearer opaqueMixedCase": "Bearer [redacted]",
    }
    assert {line: redact_foreign(line) for line in credentials} == credentials


async def test_a_real_httpx_request_line_loses_its_query(make_settings: Callable[..., Settings]) -> None:
    """httpx logs every request URL at INFO; a callback URL's code and state must not survive."""
    with captured(("httpx", logging.INFO)) as capture:
        async with running_app(make_settings()) as app, httpx.AsyncClient(base_url=app.url) as http:
            response = await http.get("/healthz", params={"code": "MARK-CODE-1", "state": "MARK-STATE-2"})
            assert response.status_code == 200
    lines = [json.loads(line) for line in capture.lines if json.loads(line)["logger"] == "httpx"]
    assert [line["msg"] for line in lines] == [f'HTTP Request: GET {app.url}/healthz?[redacted] "HTTP/1.1 200 OK"']
    assert not any(marker in line for line in capture.lines for marker in MARKERS)
