"""Admin tokens, the admin audit log and the shared rate-limit counters (migration 0005)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import BYTEA, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7


class AdminToken(Timestamps, Base):
    """An operator's bearer token. Only its SHA-256 is stored; the token is shown once."""

    __tablename__ = "admin_tokens"
    __table_args__ = (CheckConstraint("role IN ('viewer', 'operator', 'admin')", name="role"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    name: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AdminAuditEntry(Base):
    """One admin call (API or CLI): who (token id, never the token), what, on which target, result.

    Append-only, and one link of the database's hash chain (migration 0020): the database itself
    sets ``seq``, ``prev_hash`` and ``row_hash`` on insert and refuses every update."""

    __tablename__ = "admin_audit_log"
    __table_args__ = (
        Index("ix_admin_audit_log_admin_token_id", "admin_token_id", "id"),
        Index("ix_admin_audit_log_at", "at"),  # retention (migration 0011)
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    admin_token_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("admin_tokens.id", ondelete="SET NULL"))
    actor: Mapped[str] = mapped_column(String(16))
    role: Mapped[str | None] = mapped_column(String(16))
    operation: Mapped[str] = mapped_column(String(64))
    method: Mapped[str | None] = mapped_column(String(8))
    route: Mapped[str | None] = mapped_column(Text)
    target: Mapped[str | None] = mapped_column(Text)
    status: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    prev_hash: Mapped[bytes] = mapped_column(BYTEA)
    row_hash: Mapped[bytes] = mapped_column(BYTEA)


class AdminAuditChain(Base):
    """The chain's one row: its head (the newest link) and its tail anchor (the last row retention
    deleted; seq 0 and 32 zero bytes before the first). Moved only by the insert trigger and by
    retention, each in the statement that adds or deletes the rows."""

    __tablename__ = "admin_audit_chain"
    __table_args__ = (CheckConstraint("one", name="one"),)

    one: Mapped[bool] = mapped_column(Boolean, primary_key=True, server_default=text("true"))
    head_seq: Mapped[int] = mapped_column(BigInteger)
    head_hash: Mapped[bytes] = mapped_column(BYTEA)
    tail_seq: Mapped[int] = mapped_column(BigInteger)
    tail_hash: Mapped[bytes] = mapped_column(BYTEA)


class RateLimitCounter(Base):
    """Flow creations per server client per minute, shared by every replica."""

    __tablename__ = "rate_limit_counters"

    server_client_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("server_clients.id", ondelete="CASCADE"), primary_key=True
    )
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
