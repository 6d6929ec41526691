"""Payments for operators: list, show (with the provider events received), reconcile one now.

Views leave out the checkout URL (a link that lets whoever holds it pay) and show ids only.
Reconciling one payment runs ``PaymentService.reconcile_one``, the same code as ``elicitd
payments reconcile`` for one row: ask the provider, apply its answer in one transition.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.views import columns
from service.db.base import FLOW_ID
from service.db.pagination import keyset, page
from service.errors import Conflict, PaymentNotFound
from service.payments.models import Payment, PaymentEvent
from service.payments.plugin import PaymentKindServices

if TYPE_CHECKING:
    from service.admin.deps import AdminServices


class PaymentView(msgspec.Struct):
    flow_id: str
    provider: str
    amount: int
    currency: str
    description: str
    status: str
    session_id: str | None
    payment_id: str | None
    settled_by: str | None
    session_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


class PaymentEventView(msgspec.Struct):
    event_id: str
    type: str
    outcome: str
    received_at: datetime


class PaymentDetail(msgspec.Struct):
    payment: PaymentView
    events: list[PaymentEventView]


class PaymentPage(msgspec.Struct):
    items: list[PaymentView]
    next_cursor: str | None


class Reconciled(msgspec.Struct):
    provider_status: str
    outcome: str
    payment: PaymentView


class CheckoutNotStarted(Conflict):
    code = "checkout_not_started"


def payment_view(row: Payment) -> PaymentView:
    return columns(PaymentView, row, flow_id=FLOW_ID.format(row.flow_id))


def _flow(flow_id: str) -> uuid.UUID:
    parsed = FLOW_ID.parse(flow_id)
    if parsed is None:
        raise PaymentNotFound("No payment for this flow id.")
    return parsed


async def _get(session: AsyncSession, flow_id: str) -> Payment:
    stmt = select(Payment).where(Payment.flow_id == _flow(flow_id)).execution_options(populate_existing=True)
    row = (await session.execute(stmt)).scalar_one_or_none()
    if row is None:
        raise PaymentNotFound("No payment for this flow id.")
    return row


async def list_payments(
    session: AsyncSession,
    *,
    status: str | None = None,
    provider: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> PaymentPage:
    stmt = select(Payment)
    for column, value in ((Payment.status, status), (Payment.provider, provider)):
        if value is not None:
            stmt = stmt.where(column == value)
    rows = (await session.execute(keyset(stmt, Payment.flow_id, cursor, limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda p: p.flow_id)
    return PaymentPage(items=[payment_view(p) for p in items], next_cursor=next_cursor)


async def show_payment(session: AsyncSession, flow_id: str) -> PaymentDetail:
    row = await _get(session, flow_id)
    events = (
        (
            await session.execute(
                select(PaymentEvent).where(PaymentEvent.flow_id == row.flow_id).order_by(PaymentEvent.received_at)
            )
        )
        .scalars()
        .all()
    )
    return PaymentDetail(
        payment=payment_view(row),
        events=[
            PaymentEventView(event_id=e.event_id, type=e.type, outcome=e.outcome, received_at=e.received_at)
            for e in events
        ],
    )


async def reconcile_payment(state: AdminServices, flow_id: str) -> Reconciled:
    service = state.kinds["payment"].serves(PaymentKindServices).payments
    async with state.sessions() as session:
        await _get(session, flow_id)
    action = await service.reconcile_one(_flow(flow_id))
    if action is None:
        raise CheckoutNotStarted("This payment has no checkout at the provider yet; nothing to reconcile.")
    async with state.sessions() as session:
        row = await _get(session, flow_id)
    return Reconciled(provider_status=action.provider_status, outcome=action.outcome, payment=payment_view(row))
