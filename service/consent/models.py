"""Issued consent receipts. Mirrors ``migrations/versions/0004_kinds.py``."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, String, Text, UniqueConstraint, func
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base


class ConsentReceipt(Base):
    __tablename__ = "consent_receipts"
    __table_args__ = (UniqueConstraint("flow_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    flow_id: Mapped[uuid.UUID] = mapped_column()
    server_client_id: Mapped[uuid.UUID] = mapped_column()
    subject_iss: Mapped[str] = mapped_column(Text)
    subject_sub: Mapped[str] = mapped_column(Text)
    text_sha256: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(128))
    receipt: Mapped[str] = mapped_column(Text)
    issued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
