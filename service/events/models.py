"""The event stream's tables: one counter per server client and the retained events.

``events`` is written by the same statement as what it reports (a flow's transition, a
connection's revocation), so an event exists exactly when its change committed. ``seq`` counts
per server client without gaps: ``event_streams.last_seq`` is advanced in that statement with
``INSERT … ON CONFLICT DO UPDATE``, whose row lock lasts until the commit, so two transactions of
one server client take their numbers in the order they commit — a reader that has seen ``seq = n``
has seen every event up to ``n``, and ``Last-Event-ID`` resumes without loss or repeat.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Index, String, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base


class EventStream(Base):
    """The last ``seq`` handed out for a server client's stream."""

    __tablename__ = "event_streams"

    server_client_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("server_clients.id", ondelete="CASCADE"), primary_key=True
    )
    last_seq: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class StreamEvent(Base):
    """One event of a server client's stream, kept for ``ELICITD_EVENTS_RETENTION_SECONDS``."""

    __tablename__ = "events"
    __table_args__ = (
        # The retention purge deletes by age across all clients.
        Index("ix_events_created_at", "created_at"),
    )

    server_client_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("server_clients.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # The event id (``evt_…``, ``webhook-id``): for a flow event the same as its webhook delivery's.
    # Not indexed: nothing looks an event up by it, and every index here is written on the hot path.
    id: Mapped[uuid.UUID] = mapped_column()
    type: Mapped[str] = mapped_column(String(48))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
