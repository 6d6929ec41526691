"""Grants and trust groups (DESIGN §10). Mirrors ``migrations/versions/0009_grants.py`` (and 0013).

A **grant** is the subject's permission for one grantee — a server client, or a trust group of
them — to use one connection for some scopes. It is data, never a cache: the token endpoint reads
it with the connection in the same statement, so a revoked grant stops serving on every replica
with the next request.

A **trust group** is an operator's statement that several server clients are one party ("the
services of Example Corp"). A client is in at most one group; a client in no group is its own
grantee. Grants made while a client is in a group go to the group, and the pages that ask for them
name every member.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ARRAY, Boolean, CheckConstraint, DateTime, ForeignKey, Index, LargeBinary, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

# The event stream names grants too, below this package: the prefix lives with the other ids.
from service.db.base import GRANT_ID as GRANT_ID  # noqa: PLC0414 - named here too, for its importers
from service.db.base import Base, PrefixedId, Timestamps, uuid7

GROUP_ID = PrefixedId("tg")

# How a grant came to be: a page the subject answered (a connect, API-key or grant page), the
# migration that gave existing connections to the clients whose flows made them, or an operator.
ORIGIN_FLOW = "flow"
ORIGIN_MIGRATION = "migration"
ORIGIN_ADMIN = "admin"
ORIGINS = (ORIGIN_FLOW, ORIGIN_MIGRATION, ORIGIN_ADMIN)


class TrustGroup(Timestamps, Base):
    __tablename__ = "trust_groups"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    # Whether a member may be a client without subject proof (its API key alone names any user,
    # so it reads every grant of the group on that key alone): an operator's explicit choice,
    # flagged wherever groups are shown (migration 0013).
    allow_unproven: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class TrustGroupMember(Timestamps, Base):
    """One row per member; the primary key keeps a client in at most one group."""

    __tablename__ = "trust_group_members"

    server_client_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("server_clients.id", ondelete="CASCADE"), primary_key=True
    )
    group_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trust_groups.id", ondelete="CASCADE"), index=True)


class Grant(Timestamps, Base):
    __tablename__ = "grants"
    __table_args__ = (
        CheckConstraint("num_nonnulls(server_client_id, trust_group_id) = 1", name="one_grantee"),
        CheckConstraint("origin IN ('flow', 'migration', 'admin')", name="origin"),
        # At most one live grant per (connection, grantee): giving more scopes widens that one.
        Index(
            "uq_grants_live_client",
            "connection_id",
            "server_client_id",
            unique=True,
            postgresql_where=text("revoked_at IS NULL AND server_client_id IS NOT NULL"),
        ),
        Index(
            "uq_grants_live_group",
            "connection_id",
            "trust_group_id",
            unique=True,
            postgresql_where=text("revoked_at IS NULL AND trust_group_id IS NOT NULL"),
        ),
        Index("ix_grants_server_client_id", "server_client_id"),
        Index("ix_grants_trust_group_id", "trust_group_id"),
        Index("ix_grants_flow_id", "flow_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id", ondelete="CASCADE"))
    # The token set this grant hands out (migration 0012); NULL for an API-key connection's grant.
    authorization_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("authorizations.id", ondelete="CASCADE"), index=True
    )
    server_client_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("server_clients.id", ondelete="CASCADE"))
    trust_group_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("trust_groups.id", ondelete="CASCADE"))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    origin: Mapped[str] = mapped_column(String(16))
    # The flow whose page the subject answered; NULL for migrated and operator grants, and once
    # the flow itself was deleted by retention (the grant outlives the flow's row).
    flow_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("flows.id", ondelete="SET NULL"))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Who revoked: 'subject' (on /me), 'admin', 'disconnect' (the connection went away).
    revoked_by: Mapped[str | None] = mapped_column(String(16))
    # Touched by the token endpoint at most once a minute per grant (``service.connections.tokens``).
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # HMAC over what the grant gives (``service.grants.integrity``) under a vault sub-key: a row
    # written by anyone without the keys is not honoured where a token is picked.
    mac: Mapped[bytes | None] = mapped_column(LargeBinary)
    mac_key_id: Mapped[str | None] = mapped_column(String(32))
