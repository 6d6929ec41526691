"""Registered MCP servers ("server clients") and their API keys (stored as SHA-256 only)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ARRAY, Boolean, DateTime, ForeignKey, Integer, LargeBinary, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7


class ServerClient(Timestamps, Base):
    __tablename__ = "server_clients"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    allowed_providers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    trusted_issuers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    webhook_secret_key_id: Mapped[str | None] = mapped_column(String(32))
    disabled: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    flows_per_minute: Mapped[int | None] = mapped_column(Integer)
    pending_per_subject: Mapped[int | None] = mapped_column(Integer)


class ServerClientKey(Timestamps, Base):
    __tablename__ = "server_client_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("server_clients.id", ondelete="CASCADE"),
                                                        index=True)
    key_hash: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
