"""Payment flows beyond the webhook: creation rules, idempotent checkout, reconciliation (service
and the ``elicitd payments reconcile`` command)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from service.clock import SystemClock
from service.flows.schemas import Subject
from service.payments.plugin import PaymentKindServices
from tests.conftest import TEST_KEYS
from tests.consent.helpers import create_flow, flow_row, new_sub, transitions
from tests.payments.conftest import Payments
from tests.payments.test_webhooks import payment_row
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.stripe_double import API_KEY, StripeDouble


@pytest.mark.parametrize(
    "params",
    [
        {"currency": "eur", "description": "no amount"},
        {"amount": 0, "currency": "eur", "description": "zero"},
        {"amount": 19.99, "currency": "eur", "description": "float money"},
        {"amount": 100, "currency": "euro", "description": "bad currency"},
        {"amount": 100, "currency": "eur", "description": ""},
        {"amount": 100, "currency": "eur", "description": "x", "tip": 5},
        {"amount": 100, "currency": "eur", "description": "x", "idempotency_key": "has space"},
    ],
)
async def test_invalid_payment_params_are_refused(app: RunningApp, payments: Payments, params: dict[str, Any]) -> None:
    async with app.http(payments.client.api_key) as http:
        body = {"subject": {"iss": payments.issuer.issuer, "sub": "u"}, "kind": "payment", "params": params}
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_params"


async def test_payments_need_a_configured_provider(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post(
            "/v1/flows",
            json={
                "subject": {"iss": subject.iss, "sub": subject.sub},
                "kind": "payment",
                "params": {"amount": 100, "currency": "eur", "description": "x"},
            },
        )
    assert response.status_code == 503
    assert response.json()["code"] == "payments_unavailable"


class SteppingClock(SystemClock):
    """The wall clock one second further on at every reading: racing presses that straddle second
    boundaries, every time."""

    def __init__(self) -> None:
        self.start = time.time()
        self.readings = 0

    def time(self) -> float:
        self.readings += 1
        return self.start + self.readings


async def test_checkout_is_created_once_however_often_pay_is_pressed(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow = await payments.flow(created["flow"]["id"])
    clock = SteppingClock()
    app.state.kind("payment", PaymentKindServices).payments.clock = clock
    try:
        urls = await asyncio.gather(
            *(app.state.kind("payment", PaymentKindServices).payments.checkout_url(flow) for _ in range(5))
        )
    finally:
        app.state.kind("payment", PaymentKindServices).payments.clock = SystemClock()
    assert clock.readings >= 2  # the presses did read the clock, each a second apart
    session = stripe_double.session_for(created["flow"]["id"])
    assert set(urls) == {session["url"]}
    keys = {
        r["idempotency_key"]
        for r in stripe_double.state.requests
        if r["method"] == "POST" and r["path"] == "/v1/checkout/sessions" and created["flow"]["id"] in r["body"]
    }
    assert keys == {f"elicitd-checkout-{created['flow']['id']}"}


async def test_a_paid_idempotency_key_answers_completed_and_refuses_other_amounts(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    sub = new_sub("idem")
    first = await payments.create(sub, idempotency_key="order-42")
    again = await create_flow(app, payments.client, payments.body(sub, idempotency_key="order-42"), expect=200)
    assert again["flow"]["id"] == first["flow"]["id"], "pending: the same flow is reused"
    session = await payments.checkout(first["flow"]["id"])
    await payments.webhook("checkout.session.completed", stripe_double.pay(session["id"]))
    paid = (await flow_row(app, first["flow"]["id"]))["result"]

    repeat = await create_flow(app, payments.client, payments.body(sub, idempotency_key="order-42"), expect=200)
    assert repeat["status"] == "completed"
    assert repeat["result"] == paid
    async with app.http(payments.client.api_key) as http:
        other = await http.post("/v1/flows", json=payments.body(sub, idempotency_key="order-42", amount=1))
    assert other.status_code == 409
    assert other.json()["code"] == "idempotency_key_reused"


async def test_reconcile_settles_checkouts_whose_webhook_never_came(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble
) -> None:
    paid_flow = await payments.create()
    paid = await payments.checkout(paid_flow["flow"]["id"])
    stripe_double.pay(paid["id"])
    expired_flow = await payments.create()
    expired = await payments.checkout(expired_flow["flow"]["id"])
    stripe_double.expire(expired["id"])
    open_flow = await payments.create()
    await payments.checkout(open_flow["flow"]["id"])
    # Declined by the MCP client while its checkout was still open: the checkout must close.
    declined_flow = await payments.create()
    declined = await payments.checkout(declined_flow["flow"]["id"])
    flow_ref = declined_flow["flow"]["id"]
    async with app.http(client.api_key) as http:
        answer = await http.post(
            "/v1/flows/resolve",
            json={
                "subject": declined_flow["flow"]["subject"],
                "request_state": declined_flow["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow_ref}": {"action": "decline"}},
            },
        )
    assert answer.json()["outcome"] == "declined"

    actions = {
        a.flow_id: a.outcome
        for a in await app.state.kind("payment", PaymentKindServices).payments.reconcile(older_than_seconds=0)
    }
    assert actions[paid_flow["flow"]["id"]] == "completed"
    assert actions[expired_flow["flow"]["id"]] == "expired"
    assert actions[open_flow["flow"]["id"]] == "open"
    assert actions[flow_ref] == "expired"
    assert stripe_double.session(declined["id"])["status"] == "expired"
    assert (await flow_row(app, paid_flow["flow"]["id"]))["status"] == "completed"
    assert (await payment_row(app, paid_flow["flow"]["id"]))["settled_by"] == "reconcile"
    assert (await flow_row(app, flow_ref))["status"] == "declined"
    assert (await payment_row(app, flow_ref))["status"] == "expired"
    # Nothing left to do for those; a second run touches only the one still open.
    again = {
        a.flow_id: a.outcome
        for a in await app.state.kind("payment", PaymentKindServices).payments.reconcile(older_than_seconds=0)
    }
    assert paid_flow["flow"]["id"] not in again and open_flow["flow"]["id"] in again
    assert len(await transitions(app, paid_flow["flow"]["id"])) == 1


async def test_a_checkout_the_provider_cannot_answer_for_does_not_stop_the_reconcile(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble
) -> None:
    """A checkout the provider does not know (another account's, a test-mode one) is reported as
    ``provider_error`` and left unsettled; the payments after it are still settled. Before, the
    provider's error ended the whole run, so one such row stopped every reconcile."""
    unknown_flow = await payments.create()
    await payments.checkout(unknown_flow["flow"]["id"])
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE payments SET session_id = :s WHERE flow_id = :f"),
            {"s": f"cs_unknown_{uuid.uuid4().hex}", "f": uuid.UUID(unknown_flow["flow"]["id"][3:])},
        )
        await session.commit()
    paid_flow = await payments.create()
    paid = await payments.checkout(paid_flow["flow"]["id"])
    stripe_double.pay(paid["id"])

    service = app.state.kind("payment", PaymentKindServices).payments
    actions = {a.flow_id: (a.outcome, a.provider_status) for a in await service.reconcile(older_than_seconds=0)}
    assert actions[unknown_flow["flow"]["id"]] == ("provider_error", "unknown")
    assert actions[paid_flow["flow"]["id"]] == ("completed", "complete/paid")
    assert (await flow_row(app, unknown_flow["flow"]["id"]))["status"] == "pending"
    assert (await flow_row(app, paid_flow["flow"]["id"]))["status"] == "completed"


async def test_money_arriving_for_a_finished_flow_is_marked_paid_late(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble
) -> None:
    created = await payments.create()
    flow_ref = created["flow"]["id"]
    session = await payments.checkout(flow_ref)
    async with app.http(client.api_key) as http:
        await http.post(
            "/v1/flows/resolve",
            json={
                "subject": created["flow"]["subject"],
                "request_state": created["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow_ref}": {"action": "decline"}},
            },
        )
    response = await payments.webhook("checkout.session.completed", stripe_double.pay(session["id"]))
    assert response.json()["outcome"] == "paid_late"
    assert (await flow_row(app, flow_ref))["status"] == "declined"
    assert (await payment_row(app, flow_ref))["status"] == "paid_late"


async def test_the_reconcile_command(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble, database_url: str
) -> None:
    created = await payments.create()
    session = await payments.checkout(created["flow"]["id"])
    stripe_double.pay(session["id"])
    keys = ",".join(
        f"{kid}:{__import__('base64').urlsafe_b64encode(key).decode().rstrip('=')}" for kid, key in TEST_KEYS.keys
    )
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": database_url,
        "ELICITD_KEYS": keys,
        "ELICITD_PUBLIC_URL": app.url,
        "ELICITD_STRIPE_SECRET_KEY": API_KEY,
        "ELICITD_STRIPE_API_BASE": stripe_double.url,
        "ELICITD_REDIS_URL": app.settings.redis_url or "",
        "ELICITD_REDIS_CHANNEL": app.settings.redis_channel,
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "service.cli", "payments", "reconcile", "--older-than", "0", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["flow_id"]: r for r in json.loads(done.stdout)}
    assert rows[created["flow"]["id"]]["outcome"] == "completed"
    assert rows[created["flow"]["id"]]["provider_status"] == "complete/paid"
    assert API_KEY not in done.stdout + done.stderr
    assert (await flow_row(app, created["flow"]["id"]))["status"] == "completed"
