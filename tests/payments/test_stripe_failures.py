"""Stripe (or whatever answers at its address) failing: every call ends in ``PaymentProviderError``
(502 ``payment_provider_error``), never another exception that would be a 500."""

from __future__ import annotations

import time

import pytest

from service.payments.provider import CheckoutRequest, PaymentProviderError
from service.payments.stripe_provider import StripeProvider
from tests.support.hostile import (
    DEEP_JSON,
    GARBAGE,
    NOT_JSON_BUT_SAYS_SO,
    SERVER_ERROR,
    Answer,
    Behavior,
    Hang,
    Reset,
    closed_port,
    hostile,
)

# Stripe's client retries twice with a backoff: each failing call costs a few seconds.
pytestmark = pytest.mark.slow

REQUEST = CheckoutRequest(
    flow_ref="fl_" + "0" * 32,
    amount=500,
    currency="usd",
    description="Coffee",
    success_url="https://elicitd.example/pay/done",
    cancel_url="https://elicitd.example/pay/cancel",
    expires_at=int(time.time()) + 3600,
    idempotency_key="k1",
)


async def assert_every_call_fails_cleanly(api_base: str) -> None:
    stripe = StripeProvider("sk_test_x", None, api_base=api_base, timeout=1.0)
    with pytest.raises(PaymentProviderError):
        await stripe.create_checkout(REQUEST)
    with pytest.raises(PaymentProviderError):
        await stripe.get_checkout("cs_test_1")
    with pytest.raises(PaymentProviderError):
        await stripe.expire_checkout("cs_test_1")


@pytest.mark.parametrize(
    "behavior",
    [Hang(), Reset(), GARBAGE, NOT_JSON_BUT_SAYS_SO, DEEP_JSON, SERVER_ERROR, Answer.json({"object": "surprise"}, 402)],
)
async def test_a_failing_stripe_is_a_payment_provider_error(behavior: Behavior) -> None:
    with hostile(default=behavior) as server:
        await assert_every_call_fails_cleanly(server.url)


async def test_unreachable_and_tls_failures() -> None:
    await assert_every_call_fails_cleanly(f"http://127.0.0.1:{closed_port()}")
    with hostile(default=GARBAGE) as server:
        await assert_every_call_fails_cleanly(server.tls_url)
