"""The payment-provider interface: small enough that a second provider is one more module.

elicitd needs four things from a provider: create a hosted checkout for one amount, look one up
(when the user returns before the webhook), expire one (reconciliation), and turn a signed
webhook request into a verified event. Everything else — how a provider names its states — is
mapped here onto ``Settlement`` so that the flow logic is written once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from service.errors import ElicitdError


class InvalidWebhook(ElicitdError):
    """Bad signature, stale or future timestamp, or a body that is not an event."""

    code = "invalid_signature"
    status = 400
    title = "Webhook rejected"


class PaymentProviderError(ElicitdError):
    """The provider refused or could not be reached; its message is not passed on (it may echo input)."""

    code = "payment_provider_error"
    status = 502
    title = "Payment provider failed"


@dataclass(frozen=True, slots=True)
class CheckoutRequest:
    flow_ref: str
    amount: int
    currency: str
    description: str
    success_url: str
    cancel_url: str
    expires_at: int
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class CheckoutSession:
    """A provider's hosted checkout, in provider-neutral words."""

    id: str
    url: str | None
    status: str  # open | complete | expired
    payment_status: str  # paid | unpaid | no_payment_required
    amount: int | None
    currency: str | None
    payment_id: str | None
    flow_ref: str | None
    expires_at: int | None


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    id: str
    type: str
    session: CheckoutSession | None


class Settlement(enum.StrEnum):
    """What a checkout's state means for the flow."""

    OPEN = "open"  # not paid yet; nothing to do
    PROCESSING = "processing"  # paid by a delayed method; wait for the async outcome event
    PAID = "paid"
    EXPIRED = "expired"
    FAILED = "failed"


def settlement_of(session: CheckoutSession) -> Settlement:
    if session.status == "complete":
        return Settlement.PAID if session.payment_status in {"paid", "no_payment_required"} else Settlement.PROCESSING
    if session.status == "expired":
        return Settlement.EXPIRED
    return Settlement.OPEN


# Events elicitd acts on and the settlement each one states. ``completed`` defers to the session's
# payment status: a bank debit completes checkout before the money is there.
HANDLED_EVENTS: dict[str, Settlement | None] = {
    "checkout.session.completed": None,
    "checkout.session.async_payment_succeeded": Settlement.PAID,
    "checkout.session.async_payment_failed": Settlement.FAILED,
    "checkout.session.expired": Settlement.EXPIRED,
}


def settlement_of_event(event: ProviderEvent) -> Settlement | None:
    """None for an event type elicitd does not act on."""
    if event.type not in HANDLED_EVENTS or event.session is None:
        return None
    stated = HANDLED_EVENTS[event.type]
    return stated if stated is not None else settlement_of(event.session)


class PaymentProvider(Protocol):
    name: str
    # The origin of the hosted checkout page: the payment page's CSP allows its form to go there only.
    checkout_origin: str

    async def create_checkout(self, request: CheckoutRequest) -> CheckoutSession: ...

    async def get_checkout(self, session_id: str) -> CheckoutSession: ...

    async def expire_checkout(self, session_id: str) -> CheckoutSession: ...

    def verify_event(self, payload: bytes, headers: Mapping[str, str]) -> ProviderEvent: ...
