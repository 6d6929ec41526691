"""A brand: how the pages look for one server client, or for every member of a trust group."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7


class Brand(Timestamps, Base):
    """One row per owner: a server client or a trust group (never both, never neither).

    The logo is stored as elicitd re-encoded it (a PNG with no metadata), never as uploaded; the
    page links it and the stylesheet by their SHA-256, so a changed brand is a new URL and a
    served one may be cached for a year.
    """

    __tablename__ = "brands"
    __table_args__ = (
        CheckConstraint("num_nonnulls(server_client_id, trust_group_id) = 1", name="one_owner"),
        CheckConstraint("(logo_png IS NULL) = (logo_sha256 IS NULL)", name="logo_pair"),
        CheckConstraint("accent IS NULL OR accent ~ '^#[0-9a-f]{6}$'", name="accent_hex"),
        CheckConstraint("accent_dark IS NULL OR accent_dark ~ '^#[0-9a-f]{6}$'", name="accent_dark_hex"),
        Index("uq_brands_server_client", "server_client_id", unique=True),
        Index("uq_brands_trust_group", "trust_group_id", unique=True),
        Index("ix_brands_logo_sha256", "logo_sha256"),
        Index("ix_brands_style_sha256", "style_sha256"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("server_clients.id", ondelete="CASCADE"))
    trust_group_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("trust_groups.id", ondelete="CASCADE"))
    # Lowercase #rrggbb, checked for contrast when set (service.branding.colours).
    accent: Mapped[str | None] = mapped_column(String(7))
    accent_dark: Mapped[str | None] = mapped_column(String(7))
    # SHA-256 (hex) of the stylesheet the accents make; NULL when the brand sets no accent.
    style_sha256: Mapped[str | None] = mapped_column(String(64))
    logo_png: Mapped[bytes | None] = mapped_column(LargeBinary)
    logo_sha256: Mapped[str | None] = mapped_column(String(64))
    logo_width: Mapped[int | None] = mapped_column(Integer)
    logo_height: Mapped[int | None] = mapped_column(Integer)
    support_url: Mapped[str | None] = mapped_column(Text)
    tagline: Mapped[str | None] = mapped_column(String(200))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
