"""Flows and their audit trail."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7
from service.flows.states import FlowStatus
from service.kinds import KIND_NAMES

_STATUSES = ", ".join(f"'{s.value}'" for s in FlowStatus)
_KINDS = ", ".join(f"'{name}'" for name in KIND_NAMES)


class Flow(Timestamps, Base):
    __tablename__ = "flows"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUSES})", name="status"),
        CheckConstraint(f"kind IN ({_KINDS})", name="kind"),
        # Create-or-reuse relies on this: at most one pending flow per (client, subject, request).
        Index(
            "uq_flows_pending_reuse",
            "server_client_id",
            "subject_iss",
            "subject_sub",
            "kind",
            "reuse_key",
            unique=True,
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_flows_pending_expiry", "expires_at", postgresql_where=text("status = 'pending'")),
        Index("ix_flows_subject", "subject_iss", "subject_sub", "id"),
        Index("ix_flows_client_id", "server_client_id", "id"),
        # Admin listing (migration 0005): keyset pagination orders by the time-ordered id, so each
        # filter has an (x, id) index and "x = :v AND id < :cursor ORDER BY id DESC" is a range scan.
        Index("ix_flows_status_id", "status", "id"),
        Index("ix_flows_kind_id", "kind", "id"),
        Index("ix_flows_provider_id", "provider", "id"),
        Index("ix_flows_created_at", "created_at"),
        Index("ix_flows_expires_at", "expires_at"),
        # Retention (migration 0011): only flows still holding a result, so it shrinks as they are cleared.
        Index("ix_flows_result_held", "completed_at", postgresql_where=text("result IS NOT NULL")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("server_clients.id", ondelete="RESTRICT"))
    kind: Mapped[str] = mapped_column(String(32))
    subject_iss: Mapped[str] = mapped_column(Text)
    subject_sub: Mapped[str] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(String(64))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    params: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    context: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    reuse_key: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    external_url: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    connection_id: Mapped[uuid.UUID | None] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class FlowEvent(Base):
    __tablename__ = "flow_events"
    __table_args__ = (Index("ix_flow_events_flow", "flow_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    flow_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("flows.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    type: Mapped[str] = mapped_column(String(48))
    actor: Mapped[str] = mapped_column(String(16))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
