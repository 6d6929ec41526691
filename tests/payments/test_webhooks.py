"""Stripe webhooks against a local Stripe double: signatures, the ±5-minute window, exactly-once
processing per event id, and the mapping of each event onto the flow."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from sqlalchemy import text

from tests.consent.helpers import flow_row, transitions
from tests.payments.conftest import Payments
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.stripe_double import StripeDouble
from tests.support.waiting import parked


async def payment_events(
    app: RunningApp, event_id: str | None = None, flow_ref: str | None = None
) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT event_id, type, outcome FROM payment_events WHERE (CAST(:e AS text) IS NULL OR event_id = :e) "
                "AND (CAST(:f AS uuid) IS NULL OR flow_id = :f) ORDER BY received_at"
            ),
            {"e": event_id, "f": None if flow_ref is None else uuid.UUID(flow_ref[3:])},
        )
        return [dict(r._mapping) for r in rows]


async def payment_row(app: RunningApp, flow_ref: str) -> dict[str, Any]:
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text("SELECT status, payment_id, settled_by FROM payments WHERE flow_id = :f"),
                {"f": uuid.UUID(flow_ref[3:])},
            )
        ).first()
    assert row is not None
    return dict(row._mapping)


async def resolve(app: RunningApp, client: ServerClientHandle, created: dict[str, Any], wait: float) -> Any:
    flow_id = created["flow"]["id"]
    async with app.http(client.api_key) as http:
        return await http.post(
            "/v1/flows/resolve",
            json={
                "subject": created["flow"]["subject"],
                "request_state": created["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
                "wait_seconds": wait,
            },
        )


async def test_webhook_completes_the_flow_and_wakes_a_waiting_resolve(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create(amount=2500, currency="usd", description="Pro plan, one month")
    flow_id = created["flow"]["id"]
    assert (
        created["mcp"]["inputRequests"][f"elicitd_{flow_id}"]["params"]["message"]
        == "Pay 25.00 USD for Pro plan, one month."
    )
    session = await payments.checkout(flow_id)
    assert (session["amount_total"], session["currency"], session["client_reference_id"]) == (2500, "usd", flow_id)
    # The flow lives as long as its checkout can be paid (Stripe's minimum is 30 minutes).
    assert (await flow_row(app, flow_id))["expires_at"].timestamp() >= session["expires_at"]

    waiting = asyncio.create_task(resolve(app, client, created, 20))
    await parked(app, flow_id)
    assert not waiting.done()
    paid = stripe_double.pay(session["id"])
    response = await payments.webhook("checkout.session.completed", paid)
    assert response.status_code == 200
    assert response.json() == {"received": True, "outcome": "completed"}

    answer = (await waiting).json()
    assert answer["outcome"] == "completed"
    assert answer["result"] == {
        "payment_id": paid["payment_intent"],
        "amount": 2500,
        "currency": "usd",
        "status": "paid",
        "provider": "stripe",
        "checkout_session_id": session["id"],
    }
    assert [(t["actor"], t["to_status"], t["detail"]) for t in await transitions(app, flow_id)] == [
        ("provider", "completed", {"settled_by": "webhook"})
    ]
    assert await payment_row(app, flow_id) == {
        "status": "paid",
        "payment_id": paid["payment_intent"],
        "settled_by": "webhook",
    }


async def test_the_same_event_delivered_ten_times_makes_one_transition(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    payload = stripe_double.event("checkout.session.completed", stripe_double.pay(session["id"]))
    responses = await asyncio.gather(*(stripe_double.deliver(app.url, payload) for _ in range(10)))
    assert [r.status_code for r in responses] == [200] * 10
    outcomes = sorted(r.json()["outcome"] for r in responses)
    assert outcomes == ["completed"] + ["duplicate"] * 9
    assert len(await transitions(app, flow_id)) == 1
    assert [e["outcome"] for e in await payment_events(app, flow_ref=flow_id)] == ["completed"]
    # And once more, later, one by one.
    again = await stripe_double.deliver(app.url, payload)
    assert again.json()["outcome"] == "duplicate"
    assert len(await transitions(app, flow_id)) == 1


async def test_bad_signatures_are_rejected_and_change_nothing(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    payload = stripe_double.event("checkout.session.completed", stripe_double.pay(session["id"]))
    wrong_secret = await stripe_double.deliver(app.url, payload, secret="whsec_someone_else")
    tampered = payload.replace(b'"amount_total": 1999', b'"amount_total": 1')
    assert tampered != payload
    body_changed = await stripe_double.deliver(app.url, tampered, header=stripe_double.signature_header(payload))
    no_header = await stripe_double.deliver(app.url, payload, header="")
    garbage = await stripe_double.deliver(app.url, payload, header="t=abc,v1=zz")
    for response in (wrong_secret, body_changed, no_header, garbage):
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["code"] == "invalid_signature"
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert await payment_events(app, flow_ref=flow_id) == []


async def test_timestamps_outside_five_minutes_are_rejected_in_both_directions(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    paid = stripe_double.pay(session["id"])
    now = int(time.time())
    old = await payments.webhook("checkout.session.completed", paid, timestamp=now - 600)
    future = await payments.webhook("checkout.session.completed", paid, timestamp=now + 600)
    for response in (old, future):
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_signature"
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert await payment_events(app, flow_ref=flow_id) == []
    # Inside the window (clock skew of four minutes either way) the event is accepted.
    skewed = await payments.webhook("checkout.session.completed", paid, timestamp=now + 240)
    assert skewed.status_code == 200
    assert skewed.json()["outcome"] == "completed"


async def test_events_for_unknown_or_foreign_flows_are_acknowledged_and_ignored(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    other = await payments.create()
    other_session = await payments.checkout(other["flow"]["id"])

    unknown = dict(stripe_double.pay(session["id"]), id="cs_test_not_ours", client_reference_id=flow_id)
    response = await payments.webhook("checkout.session.completed", unknown)
    assert (response.status_code, response.json()["outcome"]) == (200, "unknown_flow")
    # Our session, but claiming to be for another flow: never completes either of them.
    foreign = dict(stripe_double.pay(other_session["id"]), client_reference_id=flow_id)
    response = await payments.webhook("checkout.session.completed", foreign)
    assert (response.status_code, response.json()["outcome"]) == (200, "foreign_flow")
    # Other object types and event types are acknowledged without effect.
    response = await payments.webhook("payment_intent.succeeded", {"id": "pi_1", "object": "payment_intent"})
    assert (response.status_code, response.json()["outcome"]) == (200, "ignored")

    for ref in (flow_id, other["flow"]["id"]):
        assert (await flow_row(app, ref))["status"] == "pending"
        assert await transitions(app, ref) == []


async def test_an_event_with_another_amount_never_completes(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create(amount=5000)
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    cheaper = dict(stripe_double.pay(session["id"]), amount_total=50)
    response = await payments.webhook("checkout.session.completed", cheaper)
    assert (response.status_code, response.json()["outcome"]) == (200, "amount_mismatch")
    assert (await flow_row(app, flow_id))["status"] == "pending"


async def test_an_expired_session_expires_the_flow(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    response = await payments.webhook("checkout.session.expired", stripe_double.expire(session["id"]))
    assert (response.status_code, response.json()["outcome"]) == (200, "expired")
    row = await flow_row(app, flow_id)
    assert (row["status"], row["error_code"]) == ("expired", "payment_expired")
    assert (await payment_row(app, flow_id))["status"] == "expired"
    answer = (await resolve(app, client, created, 0)).json()
    assert answer["outcome"] == "expired"


async def test_a_delayed_payment_waits_for_its_outcome_event(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_id = created["flow"]["id"]
    session = await payments.checkout(flow_id)
    pending = stripe_double.pay(session["id"], payment_status="unpaid")
    response = await payments.webhook("checkout.session.completed", pending)
    assert response.json()["outcome"] == "processing"
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert (await payment_row(app, flow_id))["status"] == "processing"
    succeeded = stripe_double.settle_async(session["id"], succeeded=True)
    response = await payments.webhook("checkout.session.async_payment_succeeded", succeeded)
    assert response.json()["outcome"] == "completed"
    assert (await flow_row(app, flow_id))["result"]["status"] == "paid"

    failing = await payments.create()
    failing_session = await payments.checkout(failing["flow"]["id"])
    stripe_double.pay(failing_session["id"], payment_status="unpaid")
    response = await payments.webhook(
        "checkout.session.async_payment_failed", stripe_double.session(failing_session["id"])
    )
    assert response.json()["outcome"] == "failed"
    row = await flow_row(app, failing["flow"]["id"])
    assert (row["status"], row["error_code"]) == ("failed", "payment_failed")


async def test_webhooks_are_refused_when_payments_are_not_configured(
    elicitd: RunningApp, stripe_double: StripeDouble
) -> None:
    response = await stripe_double.deliver(elicitd.url, b"{}")
    assert response.status_code == 503
    assert response.json()["code"] == "payments_unavailable"
