"""Webhook endpoints on real parts: several per server client, each with its filter and secret,
verified by a challenge, rotated with a grace period, suspended after failing for long, and their
attempts listed by the admin API and the CLI. A real HTTP receiver on loopback answers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from standardwebhooks import Webhook, WebhookVerificationError

from elicitd_client.webhooks import verify_event
from service.flows.repository import Transition
from service.flows.retention import run_retention
from service.flows.states import Actor, FlowStatus
from service.settings import Settings, normalize_database_url
from tests.admin.conftest import admin_http, complete_flow, create_flow, legacy_state, make_token
from tests.signals.receiver import Received, Receiver, receiving
from tests.signals.test_webhooks import FAST, delivery_round, with_webhook
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, running_app
from tests.support.waiting import until


def types(received: list[Received]) -> list[str]:
    return [json.loads(r.body)["type"] for r in received]


async def add_endpoint(
    app: RunningApp, client: ServerClientHandle, url: str, events: list[str] | None
) -> dict[str, Any]:
    async with admin_http(app, await make_token(app, "admin")) as http:
        response = await http.post(
            f"/admin/v1/server-clients/{client.public_id}/webhook-endpoints", json={"url": url, "events": events}
        )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    assert made["endpoint"]["state"] == "pending_verification"
    assert made["secret"].startswith("whsec_")
    return made


async def state_of(app: RunningApp, endpoint_id: str) -> str:
    async with admin_http(app, await make_token(app, "viewer")) as http:
        response = await http.get(f"/admin/v1/webhook-endpoints/{endpoint_id}")
    assert response.status_code == 200, response.text
    return str(response.json()["state"])


async def verified(app: RunningApp, endpoint_id: str) -> None:
    async def active() -> bool:
        return await state_of(app, endpoint_id) == "active"

    await until(active, timeout=30, what="the endpoint verified")


async def queued_for(app: RunningApp, endpoint_id: str) -> list[str]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT event_type FROM webhook_outbox WHERE endpoint_id = :e ORDER BY created_at"),
            {"e": uuid.UUID(endpoint_id[3:])},
        )
        return [r[0] for r in rows]


async def fail_flow(app: RunningApp, client: ServerClientHandle) -> str:
    flow_id = await create_flow(app, client)
    moved = await app.state.flows.finish(
        uuid.UUID(flow_id[3:]), Transition(FlowStatus.FAILED, Actor.API, error_code="boom")
    )
    assert moved is not None
    return flow_id


def fast(make_settings: Callable[..., Settings], **extra: str) -> Settings:
    return make_settings(extra={**FAST, **extra})


async def test_a_second_endpoint_with_a_filter_receives_only_its_types(make_settings: Callable[..., Settings]) -> None:
    async with (
        receiving() as first,
        receiving(Receiver()) as second,
        running_app(fast(make_settings)) as app,
    ):
        client, first_secret = await with_webhook(app, first.url)
        made = await add_endpoint(app, client, second.url, ["flow.failed"])
        endpoint_id = made["endpoint"]["id"]
        await verified(app, endpoint_id)
        assert len(second.challenges) == 1
        # The challenge is signed with the endpoint's own secret, like every delivery to it.
        challenge = verify_event(made["secret"], second.challenges[0].body, second.challenges[0].headers)
        assert challenge["type"] == "webhook.verification"
        assert challenge["data"]["endpoint_id"] == endpoint_id

        completed = await create_flow(app, client)
        assert (await complete_flow(app, client, completed)).status_code == 200
        failed = await fail_flow(app, client)
        await until(lambda: len(first.ok()) == 2 and len(second.ok()) == 1, timeout=30, what="the deliveries")
        assert await queued_for(app, endpoint_id) == ["flow.failed"]  # flow.completed was never queued for it

    assert sorted(types(first.ok())) == ["flow.completed", "flow.failed"]
    assert types(second.ok()) == ["flow.failed"]
    got = second.ok()[0]
    assert json.loads(got.body)["data"]["flow_id"] == failed
    # One event at two endpoints: the same webhook-id, each signed with its endpoint's secret.
    at_first = next(r for r in first.ok() if json.loads(r.body)["type"] == "flow.failed")
    assert got.headers["webhook-id"] == at_first.headers["webhook-id"]
    Webhook(made["secret"]).verify(got.body, got.headers)
    Webhook(first_secret).verify(at_first.body, at_first.headers)
    try:
        Webhook(first_secret).verify(got.body, got.headers)
        raise AssertionError("the first endpoint's secret verified the second endpoint's delivery")
    except WebhookVerificationError:
        pass


async def test_rotation_sends_both_signatures_during_the_grace_then_only_the_new(
    make_settings: Callable[..., Settings],
) -> None:
    async with receiving(Receiver()) as receiver, running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, "https://127.0.0.1:9/unused", verify=False)
        made = await add_endpoint(app, client, receiver.url, ["flow.completed"])
        endpoint_id, old = made["endpoint"]["id"], made["secret"]
        await verified(app, endpoint_id)
        async with admin_http(app, await make_token(app, "admin")) as http:
            response = await http.post(
                f"/admin/v1/webhook-endpoints/{endpoint_id}/rotate-secret", json={"grace_seconds": 3600}
            )
        assert response.status_code == 200, response.text
        new = response.json()["secret"]
        assert new != old and response.json()["endpoint"]["previous_secret_until"] is not None

        in_grace = await create_flow(app, client)
        assert (await complete_flow(app, client, in_grace)).status_code == 200
        await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the delivery in the grace period")

        # The grace ends when the database says so.
        async with app.state.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE webhook_endpoints SET previous_secret_until = now() - interval '1 second' WHERE id = :e"),
                {"e": uuid.UUID(endpoint_id[3:])},
            )
        after = await create_flow(app, client)
        assert (await complete_flow(app, client, after)).status_code == 200
        await until(lambda: len(receiver.ok()) == 2, timeout=30, what="the delivery after the grace period")

    during, later = receiver.ok()
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert Webhook(old).verify(during.body, during.headers)["data"]["flow_id"] == in_grace
    assert Webhook(new).verify(during.body, during.headers)["data"]["flow_id"] == in_grace
    assert len(later.headers["webhook-signature"].split(" ")) == 1
    assert Webhook(new).verify(later.body, later.headers)["data"]["flow_id"] == after
    try:
        Webhook(old).verify(later.body, later.headers)
        raise AssertionError("the rotated-out secret still verifies after its grace period")
    except WebhookVerificationError:
        pass


async def test_an_endpoint_that_never_answers_the_challenge_receives_nothing(
    make_settings: Callable[..., Settings],
) -> None:
    async with receiving(Receiver(echo=False)) as silent, running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, "https://127.0.0.1:9/unused", verify=False)
        made = await add_endpoint(app, client, silent.url, None)
        endpoint_id = made["endpoint"]["id"]
        await until(lambda: len(silent.challenges) >= 2, timeout=30, what="the challenge asked again")
        for _ in range(3):
            flow_id = await create_flow(app, client)
            assert (await complete_flow(app, client, flow_id)).status_code == 200
        await fail_flow(app, client)
        await delivery_round(app)
        assert await state_of(app, endpoint_id) == "pending_verification"
        assert await queued_for(app, endpoint_id) == []
        async with admin_http(app, await make_token(app, "viewer")) as http:
            listed = (await http.get(f"/admin/v1/webhook-endpoints/{endpoint_id}/attempts")).json()["items"]
    assert silent.received == []  # nothing but challenges reached it
    assert {a["event_type"] for a in listed} == {"webhook.verification"}
    assert {(a["status"], a["error"]) for a in listed} == {(200, "no echo")}


async def test_a_url_set_by_the_deprecated_put_answers_the_challenge_first_too(
    make_settings: Callable[..., Settings],
) -> None:
    """``PUT …/webhook`` writes the client's legacy endpoint (migration 0023): a URL that never
    answers the challenge receives nothing; moved to one that answers, it receives what comes after."""
    async with (
        receiving(Receiver(echo=False)) as silent,
        receiving() as answering,
        running_app(fast(make_settings)) as app,
    ):
        client, secret = await with_webhook(app, silent.url, verify=False)
        await until(lambda: len(silent.challenges) >= 2, timeout=30, what="the challenge asked again")
        before = await create_flow(app, client)
        assert (await complete_flow(app, client, before)).status_code == 200
        await delivery_round(app)
        assert await legacy_state(app, client.id) == "pending_verification"
        async with admin_http(app, await make_token(app, "admin")) as http:
            moved = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": answering.url})
        assert moved.status_code == 200, moved.text
        assert moved.json()["webhook_secret"] is None  # the secret stays: it was shown once

        async def verified() -> bool:
            return await legacy_state(app, client.id) == "active"

        await until(verified, timeout=30, what="the moved webhook verified")
        after = await create_flow(app, client)
        assert (await complete_flow(app, client, after)).status_code == 200
        await until(lambda: len(answering.ok()) == 1, timeout=30, what="the event after verification")
    assert silent.received == []  # nothing but challenges reached the silent URL
    assert len(answering.challenges) == 1
    event = verify_event(secret, answering.ok()[0].body, answering.ok()[0].headers)
    assert (event["type"], event["data"]["flow_id"]) == ("flow.completed", after)  # not the one before


@pytest.mark.slow  # the CLI is a process of its own (~7 s to start)
async def test_a_failing_endpoint_is_suspended_the_event_is_told_and_attempts_are_listed(
    make_settings: Callable[..., Settings], signals_database: str, backend: backends.Backends
) -> None:
    """Failing for longer than ``ELICITD_WEBHOOK_SUSPEND_AFTER_SECONDS`` (here an hour, reached by
    moving the stored ``failing_since`` back, the database being the clock) suspends the endpoint."""
    failing = Receiver(answer=lambda _event, _seen: 500)
    settings = fast(make_settings, WEBHOOK_SUSPEND_AFTER_SECONDS="3600", WEBHOOK_BACKOFF_SECONDS="3600")
    async with receiving() as healthy, receiving(failing), running_app(settings) as app:
        client, _ = await with_webhook(app, healthy.url)
        made = await add_endpoint(app, client, failing.url, ["flow.completed"])
        endpoint_id = made["endpoint"]["id"]
        key = uuid.UUID(endpoint_id[3:])
        await verified(app, endpoint_id)
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        await until(lambda: len(failing.received) == 1 and len(healthy.ok()) == 1, timeout=30, what="first tries")

        async def failing_since() -> Any:
            async with app.state.sessions() as session:
                return (
                    await session.execute(text("SELECT failing_since FROM webhook_endpoints WHERE id = :e"), {"e": key})
                ).scalar()

        await until(lambda: _not_none(failing_since()), timeout=10, what="the failure recorded")
        assert await state_of(app, endpoint_id) == "active"  # one failure is not long enough
        async with app.state.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE webhook_endpoints SET failing_since = now() - interval '2 hours' WHERE id = :e"),
                {"e": key},
            )
            await session.execute(
                text("UPDATE webhook_outbox SET next_attempt_at = now() WHERE endpoint_id = :e"), {"e": key}
            )
        await until(lambda: len(failing.received) == 2, timeout=30, what="the retry")
        await until(lambda: len(healthy.ok()) == 2, timeout=30, what="the suspension told")
        assert await state_of(app, endpoint_id) == "suspended"
        told = json.loads(healthy.ok()[1].body)
        assert told["type"] == "webhook.endpoint_suspended"
        assert told["data"]["endpoint_id"] == endpoint_id
        assert told["data"]["last_status"] == 500
        async with app.state.sessions() as session:
            streamed = (
                (
                    await session.execute(
                        text(
                            "SELECT payload FROM events WHERE server_client_id = :c AND type = 'webhook.endpoint_suspended'"
                        ),
                        {"c": uuid.UUID(client.public_id[3:])},
                    )
                )
                .scalars()
                .all()
            )
        assert [s["endpoint_id"] for s in streamed] == [endpoint_id]

        # Nothing more is queued for it, and what was queued is held, until an operator enables it.
        another = await create_flow(app, client)
        assert (await complete_flow(app, client, another)).status_code == 200
        await until(lambda: len(healthy.ok()) == 3, timeout=30, what="the next event at the healthy endpoint")
        async with app.state.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE webhook_outbox SET next_attempt_at = now() WHERE endpoint_id = :e"), {"e": key}
            )
        await delivery_round(app)
        assert len(failing.received) == 2
        assert await queued_for(app, endpoint_id) == ["flow.completed"]

        async with admin_http(app, await make_token(app, "viewer")) as http:
            listed = (await http.get(f"/admin/v1/webhook-endpoints/{endpoint_id}/attempts")).json()
        events_tried = [a for a in listed["items"] if a["event_type"] == "flow.completed"]
        assert [(a["attempt"], a["status"], a["error"]) for a in events_tried] == [
            (2, 500, "http 500"),
            (1, 500, "http 500"),
        ]
        assert all(a["duration_ms"] >= 0 for a in listed["items"])
        assert made["secret"] not in json.dumps(listed)

        code, out, err = await _cli(signals_database, backend.redis_url, "webhooks", "attempts", endpoint_id, "--json")
        assert code == 0, err
        assert json.loads(out)["items"] == listed["items"]

        async with admin_http(app, await make_token(app, "admin")) as http:
            enabled = await http.post(f"/admin/v1/webhook-endpoints/{endpoint_id}/enable")
        assert enabled.status_code == 200 and enabled.json()["state"] == "pending_verification"


async def _not_none(value: Awaitable[Any]) -> bool:
    return (await value) is not None


async def _cli(database_url: str, redis_url: str, *args: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": normalize_database_url(database_url),
        "ELICITD_REDIS_URL": redis_url,
        "ELICITD_KEYS": "test2:" + "A" * 43 + ",test1:" + "B" * 43,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "admin",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_retention_deletes_attempts_older_than_the_outbox_window(make_settings: Callable[..., Settings]) -> None:
    async with running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, "https://127.0.0.1:9/unused", verify=False)
        endpoint_id = (await add_endpoint(app, client, "https://127.0.0.1:9/other", None))["endpoint"]["id"]
        key = uuid.UUID(endpoint_id[3:])
        async with app.state.sessions() as session, session.begin():
            await session.execute(
                text(
                    "INSERT INTO webhook_attempts (endpoint_id, event_type, attempt, at, status, duration_ms, error) "
                    "VALUES (:e, 'flow.completed', 1, now() - interval '8 days', 500, 1.0, 'http 500'), "
                    "(:e, 'flow.completed', 2, now() - interval '6 days', 200, 1.0, NULL)"
                ),
                {"e": key},
            )
        done = await run_retention(app.state.sessions, make_settings())
        async with app.state.sessions() as session:
            kept = (
                (
                    await session.execute(
                        text(
                            "SELECT attempt FROM webhook_attempts WHERE endpoint_id = :e AND event_type = 'flow.completed'"
                        ),
                        {"e": key},
                    )
                )
                .scalars()
                .all()
            )
    assert done["webhook_attempts"] >= 1
    assert kept == [2]


async def test_the_legacy_endpoint_and_the_old_columns_stay_one(make_settings: Callable[..., Settings]) -> None:
    """For one release the old webhook columns mirror the client's first endpoint both ways: what
    a replica of the previous release reads there is what this release delivers with."""
    async with running_app(fast(make_settings)) as app:
        client, first_secret = await with_webhook(app, "https://127.0.0.1:9/first", verify=False)
        async with admin_http(app, await make_token(app, "admin")) as http:
            (legacy,) = (await http.get(f"/admin/v1/server-clients/{client.public_id}/webhook-endpoints")).json()[
                "items"
            ]
            assert (legacy["legacy"], legacy["state"], legacy["url"]) == (
                True,
                "pending_verification",
                "https://127.0.0.1:9/first",
            )
            rotated = await http.post(f"/admin/v1/webhook-endpoints/{legacy['id']}/rotate-secret", json={})
            assert rotated.status_code == 200, rotated.text
            moved = await http.patch(
                f"/admin/v1/webhook-endpoints/{legacy['id']}", json={"url": "https://127.0.0.1:9/moved"}
            )
            assert moved.status_code == 200, moved.text
        async with app.state.sessions() as session:
            old = (
                await session.execute(
                    text(
                        "SELECT webhook_url, webhook_secret_key_id, webhook_secret_enc FROM server_clients WHERE id = :c"
                    ),
                    {"c": uuid.UUID(client.public_id[3:])},
                )
            ).one()
        assert moved.json()["state"] == "pending_verification"  # a new URL is verified again
        assert old.webhook_url == "https://127.0.0.1:9/moved"
        opened = app.state.vault.decrypt_text(
            old.webhook_secret_key_id, old.webhook_secret_enc, owner=client.public_id, purpose="webhook_secret"
        )
        assert opened == rotated.json()["secret"] != first_secret
        assert rotated.json()["endpoint"]["previous_secret_until"] is not None
        assert await state_of(app, legacy["id"]) == "pending_verification"
