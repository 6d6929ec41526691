"""Payments and processed provider events. Mirrors ``migrations/versions/0004_kinds.py``."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps

PAYMENT_STATUSES = ("created", "open", "processing", "paid", "expired", "failed", "paid_late")
UNSETTLED = ("created", "open", "processing")


class Payment(Timestamps, Base):
    """One checkout per payment flow. ``paid_late`` marks money received for a flow that had
    already ended (declined or expired meanwhile): an operator must refund it."""

    __tablename__ = "payments"
    __table_args__ = (
        CheckConstraint("status IN (" + ", ".join(f"'{s}'" for s in PAYMENT_STATUSES) + ")", name="status"),
        UniqueConstraint("provider", "session_id"),
        Index("ix_payments_open", "created_at", postgresql_where=text("status IN ('created', 'open', 'processing')")),
    )

    flow_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("flows.id", ondelete="CASCADE"), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    amount: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    description: Mapped[str] = mapped_column(Text)
    idempotency_key: Mapped[str] = mapped_column(String(200))
    session_id: Mapped[str | None] = mapped_column(String(255))
    checkout_url: Mapped[str | None] = mapped_column(Text)
    session_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    payment_id: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), server_default=text("'created'"))
    settled_by: Mapped[str | None] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class PaymentEvent(Base):
    __tablename__ = "payment_events"
    __table_args__ = (Index("ix_payment_events_flow_id", "flow_id"),)

    event_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    type: Mapped[str] = mapped_column(String(100))
    flow_id: Mapped[uuid.UUID | None] = mapped_column()
    session_id: Mapped[str | None] = mapped_column(String(255))
    outcome: Mapped[str] = mapped_column(String(32))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
