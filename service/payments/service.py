"""Payment flows: start a checkout, settle it from whichever verified source speaks first.

The browser pages ask this service for what to show (``summary``, ``checkout``, ``returned``,
``decline``); the pages only check the browser and render.

Three sources can settle a checkout: the provider's webhook, the lookup made when the user comes
back, and reconciliation. They all end in ``apply``, one unit of work that (for webhooks) claims
the event id, makes the flow's single conditional transition and settles the payment row. The
flow transition comes first in every path, so concurrent settlers lock rows in the same order;
whoever commits first wins and the others find nothing left to change.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from service.clock import Clock, SystemClock
from service.db.base import FLOW_ID
from service.db.unit import unit_of_work
from service.errors import ServiceUnavailable
from service.flows.models import Flow
from service.flows.repository import Transition
from service.flows.service import FlowService, UnitOfWork
from service.flows.states import Actor, FlowStatus
from service.payments import repository as repo
from service.payments.kind import parse_params
from service.payments.models import UNSETTLED, Payment
from service.payments.provider import (
    CheckoutRequest,
    CheckoutSession,
    PaymentProvider,
    PaymentProviderError,
    ProviderEvent,
    Settlement,
    settlement_of,
    settlement_of_event,
)

logger = logging.getLogger("elicitd.payments")

# Stripe accepts a Checkout expiry between 30 minutes and 24 hours from now.
PROVIDER_MIN_CHECKOUT_SECONDS = 30 * 60
MIN_CHECKOUT_SECONDS = 31 * 60
MAX_CHECKOUT_SECONDS = 24 * 3600 - 60
# The flow outlives its checkout by this much, so a payment made at the last second still lands.
SETTLE_GRACE_SECONDS = 300


@dataclass(frozen=True, slots=True)
class PaymentSummary:
    """The payment page: who asks, for what; ``processing`` while the provider is still settling."""

    flow: Flow
    client: str
    amount: int
    currency: str
    description: str
    processing: bool
    checkout_origin: str


@dataclass(frozen=True, slots=True)
class PaymentReceived:
    flow: Flow
    client: str
    amount: int
    currency: str


@dataclass(frozen=True, slots=True)
class PaymentOver:
    """The flow ended another way (declined, expired, failed); ``current`` is None when it is gone."""

    current: Flow | None


PaymentPage = PaymentSummary | PaymentReceived | PaymentOver


@dataclass(frozen=True, slots=True)
class ReconcileAction:
    flow_id: str
    session_id: str
    provider_status: str
    outcome: str


class PaymentService:
    def __init__(
        self, flows: FlowService, provider: PaymentProvider | None, public_url: str, *, clock: Clock | None = None
    ) -> None:
        self.flows = flows
        self.provider = provider
        self.public_url = public_url
        # "Now" for the checkout's expiry window, which the provider checks against its own clock.
        self.clock: Clock = clock or SystemClock()

    def _provider(self) -> PaymentProvider:
        if self.provider is None:
            raise ServiceUnavailable(
                "Payments are not configured on this elicitd.", extra={"code": "payments_unavailable"}
            )
        return self.provider

    def checkout_origin(self) -> str:
        return self._provider().checkout_origin

    async def payment(self, flow_id: uuid.UUID) -> Payment | None:
        async with self.flows.sessions() as session:
            return await repo.get(session, flow_id)

    # ---- the pages --------------------------------------------------------------------------------
    async def summary(self, flow: Flow) -> PaymentSummary:
        params = parse_params(flow.params)
        display_name, _ = await self.flows.asker(flow.server_client_id)
        payment = await self.payment(flow.id)
        return PaymentSummary(
            flow=flow,
            client=display_name,
            amount=params.amount,
            currency=params.currency,
            description=params.description,
            processing=payment is not None and payment.status == "processing",
            checkout_origin=self.checkout_origin(),
        )

    async def checkout(self, flow: Flow) -> str | PaymentPage:
        """The checkout URL to send the browser to, or, when the payment already moved on, the page."""
        url = await self.checkout_url(flow)
        return url if url is not None else await self.after_return(flow)

    async def returned(self, flow: Flow) -> PaymentPage:
        """The browser is back from checkout: ask the provider (it may beat the webhook), then say."""
        if flow.status == "pending":
            await self.refresh(flow)
        return await self.after_return(flow)

    async def after_return(self, flow: Flow) -> PaymentPage:
        current = await self.flows.read(flow.id)
        if current is not None and current.status == "pending":
            return await self.summary(current)
        if current is not None and current.status == "completed" and current.result is not None:
            display_name, _ = await self.flows.asker(flow.server_client_id)
            return PaymentReceived(
                flow=current, client=display_name, amount=current.result["amount"], currency=current.result["currency"]
            )
        return PaymentOver(current=current)

    async def decline(self, flow: Flow) -> Flow | None:
        """The user declined on our page; returns the flow as it is now (None when it is gone).

        Declined here first, then the open checkout is closed at the provider: money that still
        arrives in between is recorded as ``paid_late`` for a refund, never as a completion."""
        moved = await self.flows.finish(flow.id, Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined"))
        await self.cancel_checkout(flow.id)
        return moved or await self.flows.read(flow.id)

    # ---- checkout ---------------------------------------------------------------------------------
    async def checkout_url(self, flow: Flow) -> str | None:
        """The hosted checkout for this flow, creating it once. None when the payment already moved on."""
        provider = self._provider()
        params = parse_params(flow.params)
        flow_ref = FLOW_ID.format(flow.id)
        async with unit_of_work(self.flows.sessions) as session:
            payment = await repo.ensure_payment(
                session,
                {
                    "flow_id": flow.id,
                    "provider": provider.name,
                    "amount": params.amount,
                    "currency": params.currency,
                    "description": params.description,
                    "idempotency_key": f"elicitd-checkout-{flow_ref}",
                },
            )
        if payment.status == "open" and payment.checkout_url:
            return payment.checkout_url
        if payment.status != "created":
            return None
        expires_at = self._checkout_expiry(flow, payment)
        created = await provider.create_checkout(
            CheckoutRequest(
                flow_ref=flow_ref,
                amount=params.amount,
                currency=params.currency,
                description=params.description,
                success_url=f"{self.public_url}/pay/{flow_ref}/return",
                cancel_url=f"{self.public_url}/f/{flow_ref}",
                expires_at=expires_at,
                idempotency_key=payment.idempotency_key,
            )
        )
        session_expiry = datetime.fromtimestamp(created.expires_at or expires_at, tz=UTC)
        async with self.flows.unit_of_work() as uow:
            await repo.extend_flow(uow.session, flow.id, session_expiry + timedelta(seconds=SETTLE_GRACE_SECONDS))
            await repo.attach_session(
                uow.session, flow.id, session_id=created.id, url=created.url, expires_at=session_expiry
            )
            await uow.event(flow.id, "checkout_started", Actor.BROWSER, {"provider": provider.name})
            stored = await repo.get(uow.session, flow.id)
        return stored.checkout_url if stored is not None else None

    def _checkout_expiry(self, flow: Flow, payment: Payment) -> int:
        """When the checkout expires: the flow's expiry, kept inside the provider's window.

        Every attempt for a payment sends the same parameters under its one idempotency key (the
        provider refuses a key reused with other parameters), so the window starts when the payment
        was first asked for, not at each press: five presses straddling a second boundary once made
        four of them fail. Only an attempt so late that this window no longer meets the provider's
        minimum (the first never reached it) starts from now.
        """
        now = int(self.clock.time())
        start = int(payment.created_at.timestamp())
        if start + MIN_CHECKOUT_SECONDS - now < PROVIDER_MIN_CHECKOUT_SECONDS:
            start = now
        return min(max(int(flow.expires_at.timestamp()), start + MIN_CHECKOUT_SECONDS), start + MAX_CHECKOUT_SECONDS)

    # ---- settlement -------------------------------------------------------------------------------
    async def handle_webhook(self, payload: bytes, headers: Any) -> str:
        """Verify and apply one provider event; returns what happened (for the response and tests)."""
        provider = self._provider()
        event = provider.verify_event(payload, headers)
        settlement = settlement_of_event(event)
        if settlement is None or event.session is None:
            return "ignored"
        async with self.flows.sessions() as session:
            payment = await repo.by_session(session, provider.name, event.session.id)
        outcome = await self.apply(
            payment.flow_id if payment else None, event.session, settlement, settled_by="webhook", event=event
        )
        logger.info(
            "payment event",
            extra={
                "event": event.type,
                "outcome": outcome,
                "flow_id": FLOW_ID.format(payment.flow_id) if payment else None,
            },
        )
        return outcome

    async def refresh(self, flow: Flow) -> Payment | None:
        """The verified lookup when the user returns from checkout (it may beat the webhook)."""
        payment = await self.payment(flow.id)
        if payment is None or payment.session_id is None or payment.status not in UNSETTLED:
            return payment
        checkout = await self._provider().get_checkout(payment.session_id)
        await self.apply(flow.id, checkout, settlement_of(checkout), settled_by="return")
        return await self.payment(flow.id)

    async def cancel_checkout(self, flow_id: uuid.UUID) -> None:
        """The user declined on our page: stop the provider's page from taking money for this flow."""
        payment = await self.payment(flow_id)
        if payment is None or payment.session_id is None or payment.status not in UNSETTLED:
            return
        checkout = await self._provider().expire_checkout(payment.session_id)
        await self.apply(flow_id, checkout, settlement_of(checkout), settled_by="decline")

    async def apply(
        self,
        flow_id: uuid.UUID | None,
        checkout: CheckoutSession,
        settlement: Settlement,
        *,
        settled_by: str,
        event: ProviderEvent | None = None,
    ) -> str:
        provider = self._provider()
        async with self.flows.unit_of_work() as uow:
            if event is not None and not await repo.record_event(
                uow.session,
                event_id=event.id,
                provider=provider.name,
                event_type=event.type,
                flow_id=flow_id,
                session_id=checkout.id,
            ):
                return "duplicate"
            payment = None if flow_id is None else await repo.get(uow.session, flow_id)
            outcome = await self._apply(uow, payment, checkout, settlement, settled_by)
            if event is not None:
                await repo.set_event_outcome(uow.session, event.id, outcome)
        return outcome

    async def _apply(  # noqa: PLR0911 - one return per settlement outcome reads best
        self,
        uow: UnitOfWork,
        payment: Payment | None,
        checkout: CheckoutSession,
        settlement: Settlement,
        settled_by: str,
    ) -> str:
        if payment is None:
            return "unknown_flow"
        if payment.session_id != checkout.id or (checkout.flow_ref not in (None, FLOW_ID.format(payment.flow_id))):
            return "foreign_flow"
        if settlement is Settlement.OPEN:
            return "open"
        if settlement is Settlement.PROCESSING:
            await repo.mark_processing(uow.session, payment.flow_id)
            return "processing"
        if settlement is Settlement.PAID:
            return await self._paid(uow, payment, checkout, settled_by)
        if settlement is Settlement.EXPIRED:
            change = Transition(
                FlowStatus.EXPIRED,
                Actor.PROVIDER,
                error_code="payment_expired",
                error_message="The checkout expired before it was paid.",
                detail={"settled_by": settled_by},
            )
            moved = await uow.transition(payment.flow_id, change, require_live=False)
            settled = await repo.settle(
                uow.session, payment.flow_id, status="expired", payment_id=None, settled_by=settled_by
            )
        else:
            change = Transition(
                FlowStatus.FAILED,
                Actor.PROVIDER,
                error_code="payment_failed",
                error_message="The payment did not go through.",
                detail={"settled_by": settled_by},
            )
            moved = await uow.transition(payment.flow_id, change)
            settled = await repo.settle(
                uow.session, payment.flow_id, status="failed", payment_id=checkout.payment_id, settled_by=settled_by
            )
        if moved is not None:
            return str(moved.status)
        return settlement.value if settled else "already_settled"

    async def _paid(self, uow: UnitOfWork, payment: Payment, checkout: CheckoutSession, settled_by: str) -> str:
        if checkout.amount != payment.amount or checkout.currency != payment.currency:
            # A signed event for this session with another amount: never complete on it.
            logger.error(
                "payment amount mismatch", extra={"flow_id": FLOW_ID.format(payment.flow_id), "code": "amount_mismatch"}
            )
            return "amount_mismatch"
        result = {
            "payment_id": checkout.payment_id or checkout.id,
            "amount": payment.amount,
            "currency": payment.currency,
            "status": "paid",
            "provider": payment.provider,
            "checkout_session_id": checkout.id,
        }
        change = Transition(FlowStatus.COMPLETED, Actor.PROVIDER, result=result, detail={"settled_by": settled_by})
        moved = await uow.transition(payment.flow_id, change)
        settled = await repo.settle(
            uow.session,
            payment.flow_id,
            status="paid" if moved else "paid_late",
            payment_id=checkout.payment_id,
            settled_by=settled_by,
        )
        if moved is not None:
            return "completed"
        if settled:
            # Money arrived for a flow that had already ended: visible to `elicitd payments reconcile`.
            logger.warning(
                "payment for a finished flow", extra={"flow_id": FLOW_ID.format(payment.flow_id), "code": "paid_late"}
            )
            return "paid_late"
        return "already_settled"

    # ---- reconciliation ---------------------------------------------------------------------------
    async def reconcile(self, *, older_than_seconds: float = 300, limit: int = 500) -> list[ReconcileAction]:
        """Ask the provider about every checkout still unsettled here and apply the answer.

        Also expires, at the provider, open checkouts whose flow already ended (declined by the MCP
        client, expired here), so nobody can pay for a flow that is over.
        """
        provider = self._provider()
        async with self.flows.sessions() as session:
            rows = await repo.unsettled(session, older_than_seconds=older_than_seconds, limit=limit)
        actions = []
        for flow_id, session_id in rows:
            try:
                actions.append(await self._reconcile(provider, flow_id, session_id))
            except PaymentProviderError:
                # One checkout the provider cannot answer for (unknown to this account, or the
                # provider failing for it) must not stop the others: it stays unsettled here, is
                # reported, and is asked about again on the next run.
                logger.warning("payment reconcile failed for one checkout", extra={"flow_id": FLOW_ID.format(flow_id)})
                actions.append(
                    ReconcileAction(
                        flow_id=FLOW_ID.format(flow_id),
                        session_id=session_id,
                        provider_status="unknown",
                        outcome="provider_error",
                    )
                )
        return actions

    async def reconcile_one(self, flow_id: uuid.UUID) -> ReconcileAction | None:
        """Reconcile one payment now (an operator asking), whatever its age. None when the flow has
        no checkout at the provider yet; a settled payment reports ``already_settled``."""
        provider = self._provider()
        payment = await self.payment(flow_id)
        if payment is None or payment.session_id is None:
            return None
        return await self._reconcile(provider, flow_id, payment.session_id)

    async def _reconcile(self, provider: PaymentProvider, flow_id: uuid.UUID, session_id: str) -> ReconcileAction:
        checkout = await provider.get_checkout(session_id)
        flow = await self.flows.read(flow_id)
        if settlement_of(checkout) is Settlement.OPEN and (flow is None or flow.status != "pending"):
            checkout = await provider.expire_checkout(session_id)
        outcome = await self.apply(flow_id, checkout, settlement_of(checkout), settled_by="reconcile")
        return ReconcileAction(
            flow_id=FLOW_ID.format(flow_id),
            session_id=session_id,
            provider_status=f"{checkout.status}/{checkout.payment_status}",
            outcome=outcome,
        )
