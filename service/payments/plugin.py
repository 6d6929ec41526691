"""The ``payment`` kind: Stripe Checkout, settled by a verified webhook or a verified lookup."""

from __future__ import annotations

from dataclasses import dataclass

from service.flows.plugins import KindPlugin
from service.kind_context import KindContext
from service.payments.deps import PaymentServices, PaymentWebhookServices
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

    return StripeProvider(
        settings.stripe_secret_key,
        settings.stripe_webhook_secret,
        api_base=settings.stripe_api_base,
        timeout=settings.outbound_timeout_seconds,
    )


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class PaymentKindServices(KindContext):
    """What the payment pages, the provider's webhook and ``elicitd payments`` receive."""

    payments: PaymentService


def services(context: KindContext) -> PaymentKindServices:
    built = PaymentKindServices(
        **context.parts(),
        payments=PaymentService(
            context.flows, provider_for(context.settings), context.settings.public_url, clock=context.clock
        ),
    )
    # The pages and the webhook read it through their own Protocols: mypy checks it offers both.
    pages: PaymentServices = built
    webhook: PaymentWebhookServices = built
    del pages, webhook
    return built


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="payment",
        handler=PaymentKind(enabled=settings.stripe_secret_key is not None),
        page=payment_page,
        routes=(start_checkout, return_from_checkout, decline_payment, stripe_webhook),
        stores=("payments", "payment_events"),
        services=services,
    )
