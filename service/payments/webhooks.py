"""``POST /webhooks/stripe``: the provider's word on a checkout, verified over the raw body.

The answer is 200 for every verified event, including ones for flows elicitd does not know:
the provider would otherwise retry them for days. Only an unverifiable request gets a 400.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, post

from service.payments.deps import PaymentWebhookDeps
from service.payments.service import PaymentService


class WebhookAck(msgspec.Struct):
    received: bool
    outcome: str


@post(
    "/webhooks/stripe",
    operation_id="stripeWebhook",
    tags=["webhooks"],
    status_code=200,
    summary="Stripe webhook endpoint (Checkout Session events)",
    description="Verifies `Stripe-Signature` over the raw body with the endpoint secret, refuses timestamps more "
    "than 5 minutes old or in the future, and processes each event id once.",
)
async def stripe_webhook(request: Request[Any, Any, Any], services: PaymentWebhookDeps) -> WebhookAck:
    payments: PaymentService = services.payments
    body = await request.body()
    outcome = await payments.handle_webhook(body, request.headers)
    return WebhookAck(received=True, outcome=outcome)
