"""The webhook outbox (written in the same statement as each change it announces), the endpoints
it is delivered to (migration 0018) and the log of their delivery attempts."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, PrefixedId, Timestamps, uuid7

ENDPOINT_ID = PrefixedId("we")
ENDPOINT_STATES = ("pending_verification", "active", "suspended", "disabled")


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
    # Added by 0018: the endpoint this row goes to (NULL: queued by a release before 0018, addressed
    # by ``server_clients.webhook_url``) and the event's id (``webhook-id``; NULL: the row's own id).
    endpoint_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE", name="fk_webhook_outbox_endpoint_id"), index=True
    )
    event_id: Mapped[uuid.UUID | None] = mapped_column()


class WebhookEndpoint(Timestamps, Base):
    """One URL a server client receives events at, with its own filter, secret and state."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (
        CheckConstraint("state IN ('pending_verification', 'active', 'suspended', 'disabled')", name="state"),
        # At most one endpoint per client mirrors ``server_clients.webhook_url`` (the 0018 trigger).
        Index("ix_webhook_endpoints_legacy", "server_client_id", unique=True, postgresql_where=text("legacy")),
        Index(
            "ix_webhook_endpoints_challenge_due",
            "challenge_next_at",
            postgresql_where=text("state = 'pending_verification'"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(
            "server_clients.id", ondelete="CASCADE", name="fk_webhook_endpoints_server_client_id_server_clients"
        ),
        index=True,
    )
    url: Mapped[str] = mapped_column(Text)
    # The event types it receives; None: every type.
    events: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    state: Mapped[str] = mapped_column(String(24), server_default=text("'pending_verification'"))
    # NULL only on a legacy endpoint whose old columns name a URL without a secret.
    secret_key_id: Mapped[str | None] = mapped_column(String(32))
    secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    # During a rotation's grace the previous secret still signs (both signatures are sent).
    previous_secret_key_id: Mapped[str | None] = mapped_column(String(32))
    previous_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    previous_secret_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    legacy: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    challenge_attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    challenge_next_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    challenge_lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    suspended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WebhookAttempt(Base):
    """One POST to an endpoint and how it ended: never its body, its signature or the answer's body."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_endpoint", "endpoint_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    endpoint_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE", name="fk_webhook_attempts_endpoint_id")
    )
    delivery_id: Mapped[uuid.UUID | None] = mapped_column()
    event_type: Mapped[str] = mapped_column(String(48))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    status: Mapped[int | None] = mapped_column(Integer)
    duration_ms: Mapped[float] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
