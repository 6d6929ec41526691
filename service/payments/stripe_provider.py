"""Stripe Checkout through the official ``stripe`` package.

Creation carries an idempotency key derived from the flow, so a retried or doubled "Pay" click
yields the same Checkout Session rather than a second charge. Webhooks are verified with Stripe's
own signature check over the raw body; Stripe's library rejects only *old* timestamps, so the
future side of the ±5-minute window is checked here (a captured request cannot be pre-dated to
stay replayable).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import stripe

from service.payments.provider import (
    CheckoutRequest,
    CheckoutSession,
    InvalidWebhook,
    PaymentProviderError,
    ProviderEvent,
)

TOLERANCE_SECONDS = 300
CHECKOUT_ORIGIN = "https://checkout.stripe.com"
SIGNATURE_HEADER = "stripe-signature"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def session_from(obj: Mapping[str, Any]) -> CheckoutSession:
    intent = obj.get("payment_intent")
    payment_id = _text(intent) or (_text(intent.get("id")) if isinstance(intent, Mapping) else None)
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return CheckoutSession(
        id=str(obj.get("id") or ""),
        url=_text(obj.get("url")),
        status=str(obj.get("status") or ""),
        payment_status=str(obj.get("payment_status") or ""),
        amount=_int(obj.get("amount_total")),
        currency=(_text(obj.get("currency")) or "").lower() or None,
        payment_id=payment_id,
        flow_ref=_text(obj.get("client_reference_id")) or _text(metadata.get("elicitd_flow_id")),  # type: ignore[union-attr]
        expires_at=_int(obj.get("expires_at")),
    )


class StripeProvider:
    name = "stripe"

    def __init__(
        self, secret_key: str, webhook_secret: str | None, *, api_base: str | None = None, timeout: float = 20.0
    ) -> None:
        addresses: dict[str, str] = {"api": api_base.rstrip("/")} if api_base else {}
        # A Stripe-compatible local server (tests, stripe-mock) hosts its checkout pages itself.
        parts = urlsplit(api_base) if api_base else None
        self.checkout_origin = f"{parts.scheme}://{parts.netloc}" if parts else CHECKOUT_ORIGIN
        self._client = stripe.StripeClient(
            secret_key,
            base_addresses=addresses,  # type: ignore[arg-type]
            http_client=stripe.HTTPXClient(timeout=timeout),
            max_network_retries=2,
        )
        self._webhook_secret = webhook_secret

    def __repr__(self) -> str:  # keys must not reach a log through a repr
        return "StripeProvider()"

    async def create_checkout(self, request: CheckoutRequest) -> CheckoutSession:
        params: dict[str, Any] = {
            "mode": "payment",
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": request.currency,
                        "unit_amount": request.amount,
                        "product_data": {"name": request.description},
                    },
                }
            ],
            "success_url": request.success_url,
            "cancel_url": request.cancel_url,
            "client_reference_id": request.flow_ref,
            "metadata": {"elicitd_flow_id": request.flow_ref},
            "payment_intent_data": {"metadata": {"elicitd_flow_id": request.flow_ref}},
            "expires_at": request.expires_at,
        }
        try:
            created = await self._client.v1.checkout.sessions.create_async(
                params=params,  # type: ignore[arg-type]
                options={"idempotency_key": request.idempotency_key},
            )
        except stripe.StripeError as exc:
            raise PaymentProviderError("The payment provider could not start the checkout.") from exc
        return session_from(created.to_dict())

    async def get_checkout(self, session_id: str) -> CheckoutSession:
        try:
            found = await self._client.v1.checkout.sessions.retrieve_async(session_id)
        except stripe.StripeError as exc:
            raise PaymentProviderError("The payment provider could not be asked about this payment.") from exc
        return session_from(found.to_dict())

    async def expire_checkout(self, session_id: str) -> CheckoutSession:
        try:
            expired = await self._client.v1.checkout.sessions.expire_async(session_id)
        except stripe.InvalidRequestError:
            # Already complete or expired: Stripe refuses; the current state is what matters.
            return await self.get_checkout(session_id)
        except stripe.StripeError as exc:
            raise PaymentProviderError("The payment provider could not expire the checkout.") from exc
        return session_from(expired.to_dict())

    def verify_event(self, payload: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        if not self._webhook_secret:
            raise InvalidWebhook("Stripe webhooks are not configured on this elicitd.")
        header = headers.get(SIGNATURE_HEADER)
        try:
            stripe.WebhookSignature.verify_header(payload, header, self._webhook_secret, TOLERANCE_SECONDS)
        except stripe.SignatureVerificationError:
            raise InvalidWebhook("The Stripe signature does not verify, or its timestamp is too old.") from None
        except UnicodeDecodeError:
            raise InvalidWebhook("The webhook body is not UTF-8.") from None
        timestamp = _signed_timestamp(header or "")
        if timestamp is None or timestamp > time.time() + TOLERANCE_SECONDS:
            raise InvalidWebhook("The Stripe signature timestamp is in the future.")
        try:
            body = json.loads(payload)
        except ValueError:
            raise InvalidWebhook("The webhook body is not JSON.") from None
        if not isinstance(body, dict) or not _text(body.get("id")) or not _text(body.get("type")):
            raise InvalidWebhook("The webhook body is not a Stripe event.")
        data = body.get("data")
        obj = data.get("object") if isinstance(data, dict) else None
        session = session_from(obj) if isinstance(obj, dict) and obj.get("object") == "checkout.session" else None
        return ProviderEvent(id=body["id"], type=body["type"], session=session)


def _signed_timestamp(header: str) -> int | None:
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            try:
                return int(value)
            except ValueError:
                return None
    return None
