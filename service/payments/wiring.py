"""Registers the ``payment`` kind with the app: its creation handler, pages, webhook and provider."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State

from service.flows.service import FlowService
from service.payments.kind import PaymentKind
from service.payments.pages import decline_payment, payment_page, return_from_checkout, start_checkout
from service.payments.provider import PaymentProvider
from service.payments.service import PaymentService
from service.payments.webhooks import stripe_webhook
from service.settings import Settings


def provider_for(settings: Settings) -> PaymentProvider | None:
    """Stripe when a secret key is configured; without one the ``payment`` kind is refused (503)."""
    if not settings.stripe_secret_key:
        return None
    # Imported here: the Stripe SDK is ~5 MB of modules that an instance without payments never uses.
    from service.payments.stripe_provider import StripeProvider

    return StripeProvider(settings.stripe_secret_key, settings.stripe_webhook_secret, api_base=settings.stripe_api_base)


def install(state: State, flows: FlowService, settings: Settings) -> list[Any]:
    provider = provider_for(settings)
    state.payments = PaymentService(flows, provider, settings.public_url)
    flows.handlers["payment"] = PaymentKind(enabled=provider is not None)
    state.kind_pages["payment"] = payment_page
    return [start_checkout, return_from_checkout, decline_payment, stripe_webhook]
