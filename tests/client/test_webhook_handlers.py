"""``elicitd_client.handlers.WebhookHandlers``: served on a real loopback port as a real elicitd's
webhook endpoint, it answers the verification challenge and gets the typed events; connection
events signed exactly as elicitd signs them arrive typed; a rotation's two secrets both verify."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from sqlalchemy import text

from elicitd_client.handlers import (
    ConnectionExpiring,
    ConnectionNeedsReauthorization,
    ConnectionRecovered,
    ConnectionRefreshed,
    EndpointSuspended,
    WebhookHandlers,
    parse_event,
)
from elicitd_client.webhooks import InvalidWebhook
from service.settings import Settings
from service.signals.signing import new_secret, standard_headers, standard_signature
from service.signals.webhooks import event_body
from tests.admin.conftest import admin_http, complete_flow, create_flow, make_token
from tests.signals.receiver import Receiver, receiving
from tests.support import backends
from tests.support.apps import RunningApp, free_port, new_server_client, running_app
from tests.support.serving import InProcessServer
from tests.support.waiting import until

FAST = {"WEBHOOK_BACKOFF_SECONDS": "0.2", "WEBHOOK_BACKOFF_MAX_SECONDS": "0.5", "WEBHOOK_POLL_INTERVAL_SECONDS": "0.1"}


@contextlib.asynccontextmanager
async def serving(app: Callable[..., Any]) -> AsyncIterator[str]:
    port = free_port()
    server = InProcessServer(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    )
    task = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/hooks"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


def signed(secret: str | list[str], event_type: str, data: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A delivery as elicitd's worker makes it (``event_body`` and the Standard Webhooks headers)."""
    event_id = uuid.uuid4()
    body = event_body(event_id, event_type, datetime.now(UTC), data)
    secrets_ = [secret] if isinstance(secret, str) else secret
    msg_id = "evt_" + event_id.hex
    now = int(datetime.now(UTC).timestamp())
    headers = standard_headers(secrets_[0], msg_id, now, body)
    for other in secrets_[1:]:
        headers["webhook-signature"] += " " + standard_signature(other, msg_id, now, body)
    return body, headers


CONNECTION_DATA = {
    "connection_id": "cn_" + "a" * 32,
    "provider": "acme",
    "account_id": "acct-1",
    "subject": {"iss": "https://id.example.com", "sub": "u1"},
    "status": "needs_reauthorization",
    "reason": "invalid_grant",
    "http_status": 400,
    "expires_at": None,
    "refresh_expires_at": None,
    "occurred_at": "2026-12-11T10:00:00+00:00",
}


async def test_connection_events_arrive_typed_and_both_secrets_of_a_rotation_verify() -> None:
    new, old = new_secret(), new_secret()
    hooks = WebhookHandlers([new, old])
    seen: list[Any] = []
    hooks.on_connection_expiring(seen.append)
    hooks.on_connection_needs_reauthorization(seen.append)
    hooks.on_connection_recovered(seen.append)

    @hooks.on_connection_refreshed
    async def refreshed(event: ConnectionRefreshed) -> None:
        seen.append(event)

    kinds = {
        "connection.expiring": ConnectionExpiring,
        "connection.needs_reauthorization": ConnectionNeedsReauthorization,
        "connection.recovered": ConnectionRecovered,
        "connection.refreshed": ConnectionRefreshed,
    }
    for event_type in kinds:
        body, headers = signed([old, new] if event_type == "connection.expiring" else old, event_type, CONNECTION_DATA)
        reply = await hooks.handle(body, headers)
        assert (reply.status, reply.body) == (204, b"")
    assert [type(e) for e in seen] == list(kinds.values())
    broken = seen[1]
    assert isinstance(broken, ConnectionNeedsReauthorization)
    assert (broken.connection_id, broken.provider, broken.reason, broken.http_status) == (
        CONNECTION_DATA["connection_id"],
        "acme",
        "invalid_grant",
        400,
    )
    assert (broken.subject_iss, broken.subject_sub, broken.status) == (
        "https://id.example.com",
        "u1",
        "needs_reauthorization",
    )
    assert broken.id.startswith("evt_")

    body, headers = signed(new_secret(), "connection.recovered", CONNECTION_DATA)
    assert (await hooks.handle(body, headers)).status == 401
    with pytest.raises(InvalidWebhook, match="signature mismatch"):
        hooks.verify(body, headers)
    assert len(seen) == 4
    assert parse_event({"type": "flow.completed", "data": {}}) is None


async def test_the_helper_answers_the_challenge_and_gets_the_suspension_typed(
    make_settings: Callable[..., Settings], backend: backends.Backends
) -> None:
    holder: dict[str, WebhookHandlers] = {}
    suspended: list[EndpointSuspended] = []

    async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
        hooks = holder.get("hooks")
        if hooks is None:  # asked before the test knows the secret: elicitd asks again shortly
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await hooks.asgi_app()(scope, receive, send)

    failing = Receiver(answer=lambda _event, _seen: 503)
    async with backends.migrated_database(backend.server_url) as url:
        settings = make_settings(database_url=url, extra={**FAST, "WEBHOOK_SUSPEND_AFTER_SECONDS": "3600"})
        async with serving(endpoint) as hook_url, receiving(failing), running_app(settings) as app:
            client = await new_server_client(app)
            made = await add(app, client.public_id, hook_url, ["webhook.endpoint_suspended"])
            hooks = WebhookHandlers(made["secret"])
            hooks.on_endpoint_suspended(suspended.append)
            holder["hooks"] = hooks
            helper = str(made["endpoint"]["id"])
            await until(lambda: is_state(app, helper, "active"), timeout=30, what="the helper's endpoint verified")

            # A second endpoint that answers 503 to everything (marked verified here: it could not be).
            second = str((await add(app, client.public_id, failing.url, ["flow.completed"]))["endpoint"]["id"])
            async with app.state.sessions() as session, session.begin():
                await session.execute(
                    text("UPDATE webhook_endpoints SET state = 'active' WHERE id = :e"), {"e": uuid.UUID(second[3:])}
                )
            flow_id = await create_flow(app, client)
            assert (await complete_flow(app, client, flow_id)).status_code == 200
            await until(lambda: len(failing.ok()) == 0 and len(failing.received) >= 1, timeout=30, what="a failure")
            await until(lambda: failing_recorded(app, second), timeout=30, what="the failure recorded")
            async with app.state.sessions() as session, session.begin():
                await session.execute(
                    text("UPDATE webhook_endpoints SET failing_since = now() - interval '2 hours' WHERE id = :e"),
                    {"e": uuid.UUID(second[3:])},
                )
            await until(lambda: len(suspended) == 1, timeout=30, what="the suspension at the helper")
    event = suspended[0]
    assert isinstance(event, EndpointSuspended)
    assert (event.endpoint_id, event.url, event.last_status, event.last_error) == (second, failing.url, 503, "http 503")
    assert event.id.startswith("evt_")


async def add(app: RunningApp, client: str, url: str, events: list[str]) -> dict[str, Any]:
    async with admin_http(app, await make_token(app, "admin")) as http:
        response = await http.post(
            f"/admin/v1/server-clients/{client}/webhook-endpoints", json={"url": url, "events": events}
        )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


async def is_state(app: RunningApp, endpoint_id: str, wanted: str) -> bool:
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT state FROM webhook_endpoints WHERE id = :e"), {"e": uuid.UUID(endpoint_id[3:])}
        )
        return bool(found.scalar_one() == wanted)


async def failing_recorded(app: RunningApp, endpoint_id: str) -> bool:
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT failing_since IS NOT NULL FROM webhook_endpoints WHERE id = :e"),
            {"e": uuid.UUID(endpoint_id[3:])},
        )
        return bool(found.scalar_one())


# Deliveries signed by elicitd's own code, with fixed secrets, ids and time, shared with the
# TypeScript client's tests (clients/typescript/test/handlers.test.ts reads the same file).
SAMPLES = Path(__file__).with_name("webhook_samples.json")
SAMPLE_NEW = "whsec_" + base64.b64encode(bytes(range(32))).decode()
SAMPLE_OLD = "whsec_" + base64.b64encode(bytes(range(32, 64))).decode()
SAMPLE_TIME = 1_796_000_000


def samples() -> dict[str, Any]:
    made: list[dict[str, Any]] = []
    cases: list[tuple[str, dict[str, Any], list[str]]] = [
        (
            "webhook.verification",
            {"type": "webhook.verification", "endpoint_id": "we_" + "b" * 32, "challenge": "c-1"},
            [SAMPLE_NEW],
        ),
        *[
            (kind, {**CONNECTION_DATA, "type": kind}, [SAMPLE_NEW, SAMPLE_OLD])
            for kind in (
                "connection.expiring",
                "connection.needs_reauthorization",
                "connection.recovered",
                "connection.refreshed",
            )
        ],
        (
            "webhook.endpoint_suspended",
            {
                "type": "webhook.endpoint_suspended",
                "endpoint_id": "we_" + "c" * 32,
                "server_client": "sc_" + "d" * 32,
                "url": "https://hooks.example.com/elicitd",
                "failing_since": "2026-12-10T10:00:00+00:00",
                "last_status": 503,
                "last_error": "http 503",
                "occurred_at": "2026-12-11T10:00:00+00:00",
            },
            [SAMPLE_OLD],
        ),
    ]
    for number, (kind, data, keys) in enumerate(cases):
        event_id = uuid.UUID(int=number + 1)
        body = event_body(event_id, kind, datetime.fromtimestamp(SAMPLE_TIME, UTC), data)
        msg_id = "evt_" + event_id.hex
        headers = standard_headers(keys[0], msg_id, SAMPLE_TIME, body)
        for other in keys[1:]:
            headers["webhook-signature"] += " " + standard_signature(other, msg_id, SAMPLE_TIME, body)
        made.append({"type": kind, "body": body.decode(), "headers": headers})
    return {"secrets": {"new": SAMPLE_NEW, "old": SAMPLE_OLD}, "time": SAMPLE_TIME, "deliveries": made}


def test_the_shared_samples_are_what_elicitd_signs() -> None:
    assert json.loads(SAMPLES.read_text()) == samples()


async def test_the_samples_arrive_typed_with_either_secret() -> None:
    shared = json.loads(SAMPLES.read_text())
    for secrets_ in ([SAMPLE_NEW, SAMPLE_OLD], [SAMPLE_OLD, SAMPLE_NEW]):
        hooks = WebhookHandlers(secrets_, tolerance_seconds=float("inf"))
        seen: list[Any] = []
        for kind in (
            "connection.expiring",
            "connection.needs_reauthorization",
            "connection.recovered",
            "connection.refreshed",
            "webhook.endpoint_suspended",
        ):
            hooks.on(kind)(seen.append)
        replies = [await hooks.handle(d["body"], d["headers"]) for d in shared["deliveries"]]
        assert replies[0].status == 200 and json.loads(replies[0].body) == {"challenge": "c-1"}
        assert [r.status for r in replies[1:]] == [204] * 5
        assert [type(e).__name__ for e in seen] == [
            "ConnectionExpiring",
            "ConnectionNeedsReauthorization",
            "ConnectionRecovered",
            "ConnectionRefreshed",
            "EndpointSuspended",
        ]
    only_new = WebhookHandlers(SAMPLE_NEW, tolerance_seconds=float("inf"))
    suspended = shared["deliveries"][-1]  # signed with the old secret alone
    assert (await only_new.handle(suspended["body"], suspended["headers"])).status == 401
