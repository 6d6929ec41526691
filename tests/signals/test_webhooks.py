"""Completion webhooks against a real local HTTP receiver and real elicitd instances."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from standardwebhooks import Webhook, WebhookVerificationError

from elicitd_client.webhooks import InvalidWebhook, verify_event, verify_webhook
from service.flows import repository as repo
from service.flows.repository import Transition
from service.flows.states import Actor, FlowStatus
from service.settings import Settings
from service.signals.signing import new_secret
from tests.admin.conftest import admin_http, complete_flow, create_flow, make_token, until_verified
from tests.signals.receiver import Receiver, receiving
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.waiting import until

FAST = {"WEBHOOK_BACKOFF_SECONDS": "0.2", "WEBHOOK_BACKOFF_MAX_SECONDS": "0.5", "WEBHOOK_POLL_INTERVAL_SECONDS": "0.1"}
DOC = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def documented_verifier() -> Callable[..., bool]:
    """The verification recipe exactly as the documentation prints it."""
    block = re.search(r"```python verify\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    verify: Callable[..., bool] = namespace["verify_elicitd_webhook"]
    return verify


def fast(make_settings: Callable[..., Settings], **extra: str) -> Settings:
    return make_settings(extra={**FAST, **extra})


async def with_webhook(app: RunningApp, url: str, *, verify: bool = True) -> tuple[ServerClientHandle, str]:
    """A new server client whose webhook (``PUT …/webhook``) is ``url``; with ``verify``, once the
    receiver there has answered the verification challenge (nothing is queued for it before)."""
    client = await new_server_client(app)
    async with admin_http(app, await make_token(app, "admin")) as http:
        response = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": url})
    assert response.status_code == 200
    secret = response.json()["webhook_secret"]
    assert secret.startswith("whsec_")
    if verify:
        await until_verified(app, client.id)
    return client, secret


async def outbox(app: RunningApp, flow_id: str) -> Any:
    async with app.state.sessions() as session:
        return (
            await session.execute(
                text("SELECT * FROM webhook_outbox WHERE flow_id = :f"), {"f": uuid.UUID(flow_id[3:])}
            )
        ).one()


async def outbox_rows(app: RunningApp, flow_id: str) -> int:
    """How many outbox rows of the flow a worker's session can see right now."""
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT count(*) FROM webhook_outbox WHERE flow_id = :f"), {"f": uuid.UUID(flow_id[3:])}
        )
        return int(found.scalar_one())


async def delivered_row(app: RunningApp, flow_id: str, timeout: float = 30.0) -> Any:
    """The outbox row once its delivery is recorded: the receiver sees the POST before the worker
    writes ``delivered_at`` (after the answer), so reading the row at once races that write."""

    async def recorded() -> bool:
        return (await outbox(app, flow_id)).delivered_at is not None

    await until(recorded, timeout=timeout, what="the delivery recorded")
    return await outbox(app, flow_id)


async def delivery_round(app: RunningApp) -> int:
    """One round of the app's worker, run here: when it returns, every event it claimed has been
    POSTed and answered, so what a round would deliver is known without waiting for the next one.
    Through the worker's own client, so the address rule applies as in its background rounds."""
    async with app.state.webhooks.client() as http:
        return await app.state.webhooks.run_once(http)


async def test_signed_delivery_verifies_with_the_documented_recipe(make_settings: Callable[..., Settings]) -> None:
    verify = documented_verifier()
    async with receiving() as receiver, running_app(fast(make_settings)) as app:
        client, secret = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the event delivered")
    got = receiver.received[0]
    event = json.loads(got.body)
    assert event["type"] == "flow.completed"
    assert event["data"]["flow_id"] == flow_id
    assert event["data"]["elicitation_id"] == flow_id
    assert got.headers["webhook-id"] == event["id"] == got.headers["elicitd-event-id"]
    assert got.headers["elicitd-event-type"] == "flow.completed"
    assert verify(secret, got.body, got.headers) is True
    assert verify(secret, got.body + b" ", got.headers) is False
    assert verify(new_secret(), got.body, got.headers) is False
    assert verify(secret, got.body, {**got.headers, "webhook-timestamp": "1000"}) is False
    assert verify(secret, got.body, {**got.headers, "webhook-id": "evt_other"}) is False


async def test_a_delivery_verifies_with_the_standard_webhooks_library(
    make_settings: Callable[..., Settings],
) -> None:
    """The specification's reference package accepts the secret and the headers as they are."""
    async with receiving() as receiver, running_app(fast(make_settings)) as app:
        client, secret = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the event delivered")
    got = receiver.received[0]
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret)
    assert re.fullmatch(r"v1,[A-Za-z0-9+/]{43}=", got.headers["webhook-signature"])
    event = Webhook(secret).verify(got.body, got.headers)
    assert event["id"] == got.headers["webhook-id"]
    assert event["data"]["flow_id"] == flow_id
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(got.body.replace(b"completed", b"cancelled"), got.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(got.body, got.headers)
    # The same delivery through the client library, and the deprecated header for one release.
    assert verify_event(secret, got.body, got.headers)["id"] == event["id"]
    assert verify_webhook(secret, got.body, got.headers["elicitd-signature"])["id"] == event["id"]
    with pytest.raises(InvalidWebhook):
        verify_event(secret, got.body, {**got.headers, "webhook-signature": "v1,AAAA"})


async def test_delivery_only_after_the_transition_commits(make_settings: Callable[..., Settings]) -> None:
    async with receiving() as receiver, running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        async with app.state.sessions() as session:
            moved = await repo.FlowStatements.transition(
                session, uuid.UUID(flow_id[3:]), Transition(FlowStatus.COMPLETED, Actor.API, result={"x": 1})
            )
            assert moved is not None
            # The outbox row exists in this transaction only: no worker's session sees it, so a
            # whole delivery round run now cannot claim it.
            assert await outbox_rows(app, flow_id) == 0
            await delivery_round(app)
            assert receiver.received == []
            await session.commit()
        assert await outbox_rows(app, flow_id) == 1
        app.state.webhooks.wake()
        await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the committed event delivered")
        rolled_back = await create_flow(app, client)
        async with app.state.sessions() as session:
            moved = await repo.FlowStatements.transition(
                session,
                uuid.UUID(rolled_back[3:]),
                Transition(FlowStatus.FAILED, Actor.API, error_code="boom"),
            )
            assert moved is not None
            await session.rollback()  # a transition that rolls back is never announced
        assert await outbox_rows(app, rolled_back) == 0
        await delivery_round(app)
        assert len(receiver.received) == 1


async def test_only_a_transition_that_queued_a_delivery_wakes_the_worker(
    make_settings: Callable[..., Settings], backend: backends.Backends
) -> None:
    """A worker's round is a transaction; a transition of a server client without a webhook queues
    nothing and must not start one. With the poll tick an hour away and no background sweep, what
    is delivered within seconds was delivered because the transition woke the worker. On a
    database of its own: the suite's shared instance sweeps the shared one every 0.5 s and would
    expire the flows made due here itself."""
    async with backends.migrated_database(backend.server_url) as url:
        settings = make_settings(
            database_url=url, sweep_interval_seconds=3600, extra={"WEBHOOK_POLL_INTERVAL_SECONDS": "3600"}
        )
        async with receiving() as receiver, running_app(settings) as app:
            # Setting the webhook wakes a round of its own, for its challenge.
            hooked, _ = await with_webhook(app, receiver.url)
            plain = await new_server_client(app)
            rounds = count_rounds(app)
            await asyncio.sleep(0.3)
            assert rounds == []  # the rounds so far ran before the count began, the next poll is an hour away

            # No webhook: completed through the API (one statement), failed through a unit of work,
            # expired by a sweep.
            await move_three_ways(app, plain)
            await asyncio.sleep(0.5)
            assert rounds == []

            # A webhook: each way of moving a flow wakes the worker, which delivers at once.
            moved = await move_three_ways(app, hooked, delivered=lambda n: until(lambda: len(receiver.ok()) == n))
        assert [json.loads(r.body)["type"] for r in receiver.ok()] == ["flow.completed", "flow.failed", "flow.expired"]
        assert [json.loads(r.body)["data"]["flow_id"] for r in receiver.ok()] == moved
        assert sum(rounds) == 3  # every delivery claimed by a woken round, none by a poll


def count_rounds(app: RunningApp) -> list[int]:
    """The number of events each of the app's worker rounds claims, from now on."""
    worker = app.state.webhooks
    rounds: list[int] = []
    claim = worker.claim

    async def counted() -> list[Any]:
        claimed = await claim()
        rounds.append(len(claimed))
        return claimed

    worker.claim = counted  # type: ignore[method-assign]
    return rounds


async def move_three_ways(
    app: RunningApp, client: ServerClientHandle, delivered: Callable[[int], Awaitable[None]] | None = None
) -> list[str]:
    """Complete a flow of ``client`` through the API, fail one through a unit of work, expire one by
    a sweep; after each, await ``delivered`` with the count so far. The three flow ids."""
    flows = app.state.flows
    completed = await create_flow(app, client)
    assert (await complete_flow(app, client, completed)).status_code == 200
    if delivered is not None:
        await delivered(1)
    failed = await create_flow(app, client)
    moved = await flows.finish(uuid.UUID(failed[3:]), Transition(FlowStatus.FAILED, Actor.API, error_code="x"))
    assert moved is not None and moved.status == "failed"
    if delivered is not None:
        await delivered(2)
    expired = await create_flow(app, client)
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE flows SET expires_at = now() - interval '1 second' WHERE id = :i"),
            {"i": uuid.UUID(expired[3:])},
        )
        await session.commit()
    assert await flows.sweep_once() == 1
    if delivered is not None:
        await delivered(3)
    return [completed, failed, expired]


async def test_retries_after_receiver_errors_then_delivers(make_settings: Callable[..., Settings]) -> None:
    receiver = Receiver(answer=lambda _event, seen: 500 if seen <= 2 else 204)
    async with receiving(receiver), running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the third attempt delivered")
        row = await delivered_row(app, flow_id)
    assert [r.status for r in receiver.received] == [500, 500, 204]
    assert len({r.body for r in receiver.received}) == 1  # the same bytes on every retry
    assert row.attempts == 3
    assert row.delivered_at is not None
    assert row.last_status == 204


async def test_delivery_resumes_after_a_restart(make_settings: Callable[..., Settings]) -> None:
    failing = True
    receiver = Receiver(answer=lambda _event, _seen: 500 if failing else 200)
    async with receiving(receiver):
        settings = fast(make_settings, WEBHOOK_BACKOFF_SECONDS="1", WEBHOOK_BACKOFF_MAX_SECONDS="1")
        async with running_app(settings) as first:
            client, _ = await with_webhook(first, receiver.url)
            flow_id = await create_flow(first, client)
            assert (await complete_flow(first, client, flow_id)).status_code == 200
            await until(lambda: len(receiver.received) >= 1, timeout=30, what="a first attempt")
        # The instance is gone with the event undelivered; a new one picks it up from the outbox.
        attempts_before = len(receiver.received)
        assert receiver.ok() == []
        failing = False
        async with running_app(settings) as second:
            await until(lambda: len(receiver.ok()) == 1, timeout=30, what="delivery by the new instance")
            row = await delivered_row(second, flow_id)
    assert row.delivered_at is not None
    assert row.attempts == attempts_before + 1


async def test_abandoned_after_the_retry_window_then_replayed(make_settings: Callable[..., Settings]) -> None:
    failing = True
    receiver = Receiver(answer=lambda _event, _seen: 503 if failing else 200)
    async with receiving(receiver), running_app(fast(make_settings, WEBHOOK_GIVE_UP_SECONDS="1")) as app:
        client, _ = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        operator = await make_token(app, "operator")
        async with admin_http(app, operator) as http:
            listed: list[dict[str, Any]] = []

            async def abandoned() -> bool:
                nonlocal listed
                listed = (await http.get("/admin/v1/webhooks", params={"flow_id": flow_id})).json()["items"]
                return bool(listed) and listed[0]["state"] == "abandoned"

            await until(abandoned, timeout=10, what="the event abandoned")
            assert listed[0]["last_status"] == 503
            assert listed[0]["last_error"] == "http 503"
            tries = len(receiver.received)
            # Abandoned means no more attempts, even once its retry time has come: make it due
            # and run a delivery round.
            async with app.state.sessions() as session:
                await session.execute(
                    text("UPDATE webhook_outbox SET next_attempt_at = now() WHERE flow_id = :f"),
                    {"f": uuid.UUID(flow_id[3:])},
                )
                await session.commit()
            await delivery_round(app)
            assert len(receiver.received) == tries
            assert (await outbox(app, flow_id)).attempts == tries
            failing = False
            replayed = await http.post(f"/admin/v1/webhooks/{listed[0]['id']}/replay")
            assert replayed.status_code == 200
            await until(lambda: len(receiver.ok()) == 1, timeout=30, what="the replay delivered")
            await delivered_row(app, flow_id)  # the worker records it after the receiver's answer
            shown = (await http.get(f"/admin/v1/webhooks/{listed[0]['id']}")).json()
        assert shown["state"] == "delivered"
        assert shown["attempts"] == tries + 1


async def test_two_replicas_never_deliver_an_event_twice(make_settings: Callable[..., Settings]) -> None:
    # Slow answers and a failure for every third event keep deliveries overlapping and retrying.
    receiver = Receiver(answer=lambda event, seen: 500 if (hash(event) % 3 == 0 and seen == 1) else 200, delay=0.2)
    async with receiving(receiver), running_app(fast(make_settings)) as one, running_app(fast(make_settings)) as two:
        client, _ = await with_webhook(one, receiver.url)
        flows = [await create_flow(one, client) for _ in range(24)]
        results = await asyncio.gather(*(complete_flow(one if i % 2 else two, client, f) for i, f in enumerate(flows)))
        assert {r.status_code for r in results} == {200}
        ids = [uuid.UUID(f[3:]) for f in flows]

        async def settled() -> bool:
            # Every claim bumps ``attempts`` and makes one POST: once all 24 are delivered and the
            # receiver has answered as many POSTs as there were claims, no attempt is in flight.
            async with one.state.sessions() as session:
                row = (
                    await session.execute(
                        text(
                            "SELECT count(delivered_at) AS delivered, COALESCE(sum(attempts), 0) AS attempts "
                            "FROM webhook_outbox WHERE flow_id = ANY(:ids)"
                        ),
                        {"ids": ids},
                    )
                ).one()
            return bool(row.delivered == 24 and row.attempts == len(receiver.received))

        await until(settled, timeout=30, what="every event delivered, every attempt answered")
        # A round on each replica now: a delivered event is never claimed again.
        await delivery_round(one)
        await delivery_round(two)
    assert set(receiver.delivered_ids().values()) == {1}
    assert receiver.max_in_flight == 1
