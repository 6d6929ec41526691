"""The completion-webhook outbox, written in the same statement as each terminal transition."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7


class WebhookDelivery(Timestamps, Base):
    __tablename__ = "webhook_outbox"
    __table_args__ = (
        Index(
            "ix_webhook_outbox_due",
            "next_attempt_at",
            postgresql_where=text("delivered_at IS NULL AND abandoned_at IS NULL"),
        ),
        # Admin listing by client (keyset on id); it also serves the foreign key (migration 0006).
        Index("ix_webhook_outbox_client_id", "server_client_id", "id"),
        # Retention (migration 0011): delivered rows by when, the only ones it deletes.
        Index("ix_webhook_outbox_delivered", "delivered_at", postgresql_where=text("delivered_at IS NOT NULL")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("server_clients.id", ondelete="CASCADE"))
    # None for an event that is not about a flow (a connection event, migration 0014).
    flow_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("flows.id", ondelete="CASCADE"), index=True)
    event_type: Mapped[str] = mapped_column(String(48))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    abandoned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Added by 0005: the delivery lease (one attempt in flight per event) and the give-up clock.
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    retry_from: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
