"""The tables of operator sign-in (migration 0021): the marked issuer and the console's sessions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    LargeBinary,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base


class OperatorSignInRow(Base):
    """The one issuer marked for operator sign-in (``slot`` is unique and always true)."""

    __tablename__ = "operator_signin"
    __table_args__ = (
        CheckConstraint("slot", name="slot"),
        CheckConstraint("role_claim <> ''", name="role_claim"),
        CheckConstraint("jsonb_typeof(roles) = 'object'", name="roles"),
        UniqueConstraint("slot"),
    )

    issuer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("issuers.id", ondelete="CASCADE"), primary_key=True)
    slot: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    role_claim: Mapped[str] = mapped_column(Text)
    roles: Mapped[dict[str, Any]] = mapped_column(JSONB)
    audience: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class OperatorSessionRow(Base):
    """A console session: its id is the SHA-256 of the cookie value, never the value."""

    __tablename__ = "operator_sessions"
    __table_args__ = (CheckConstraint("role BETWEEN 1 AND 3", name="role"),)

    id: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    issuer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("issuers.id", ondelete="CASCADE"), index=True)
    iss: Mapped[str] = mapped_column(Text)
    sub: Mapped[str] = mapped_column(Text)
    display_name: Mapped[str] = mapped_column(Text)
    role: Mapped[int] = mapped_column(SmallInteger)
    csrf_secret: Mapped[bytes] = mapped_column(LargeBinary)
    authenticated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
