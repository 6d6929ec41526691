"""Registered MCP servers ("server clients") and their API keys (stored as SHA-256 only)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
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
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, Timestamps, uuid7

SUBJECT_PROOF_REQUIRED = "required"
SUBJECT_PROOF_NONE = "none"
SUBJECT_PROOF_POLICIES = (SUBJECT_PROOF_REQUIRED, SUBJECT_PROOF_NONE)


class ServerClient(Timestamps, Base):
    __tablename__ = "server_clients"
    __table_args__ = (CheckConstraint("subject_proof IN ('required', 'none')", name="subject_proof"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    allowed_providers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    trusted_issuers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    webhook_secret_key_id: Mapped[str | None] = mapped_column(String(32))
    # The event types the webhook receives (migration 0015); None: every type.
    webhook_events: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    disabled: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    flows_per_minute: Mapped[int | None] = mapped_column(Integer)
    pending_per_subject: Mapped[int | None] = mapped_column(Integer)
    # Whether every call naming a subject must carry that user's own access token (DESIGN §10).
    # New clients require it; clients registered before the policy existed were migrated to 'none'.
    subject_proof: Mapped[str] = mapped_column(String(16), server_default=text("'required'"))
    # RFC 8707 resource URIs of this MCP server: a subject token's `aud` or `resource` must name one.
    resource_uris: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))


class ServerClientKey(Timestamps, Base):
    __tablename__ = "server_client_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    server_client_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("server_clients.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Issuer(Timestamps, Base):
    """A trusted OIDC identity provider: where elicitd logs browser users in (DESIGN §5)."""

    __tablename__ = "issuers"
    __table_args__ = (
        CheckConstraint("(client_secret_enc IS NULL) = (client_secret_key_id IS NULL)", name="secret_pair"),
        CheckConstraint(
            "(introspection_secret_enc IS NULL) = (introspection_secret_key_id IS NULL)",
            name="introspection_secret_pair",
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    issuer: Mapped[str] = mapped_column(Text, unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    client_id: Mapped[str] = mapped_column(Text)
    client_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    client_secret_key_id: Mapped[str | None] = mapped_column(String(32))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{openid}'"))
    authorization_endpoint: Mapped[str | None] = mapped_column(Text)
    token_endpoint: Mapped[str | None] = mapped_column(Text)
    jwks_uri: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONB)
    metadata_fetched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # RFC 7662 introspection of opaque subject tokens: the endpoint (or the discovered one) and the
    # credentials elicitd presents there, the secret a vault value like the login client's.
    introspection_endpoint: Mapped[str | None] = mapped_column(Text)
    introspection_client_id: Mapped[str | None] = mapped_column(Text)
    introspection_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    introspection_secret_key_id: Mapped[str | None] = mapped_column(String(32))


class LoginAttempt(Base):
    """One OIDC login in progress. The id is SHA-256 of ``state``; the state itself is never stored."""

    __tablename__ = "login_attempts"

    id: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)
    issuer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("issuers.id", ondelete="CASCADE"))
    browser_binding: Mapped[bytes] = mapped_column(LargeBinary(32))
    secrets_enc: Mapped[bytes] = mapped_column(LargeBinary)
    secrets_key_id: Mapped[str] = mapped_column(String(32))
    return_to: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BrowserSession(Base):
    """A logged-in browser. The id is SHA-256 of the cookie value, so a database read leaks no cookie."""

    __tablename__ = "browser_sessions"
    __table_args__ = (Index("ix_browser_sessions_subject", "iss", "sub"),)

    id: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)
    issuer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("issuers.id", ondelete="CASCADE"))
    iss: Mapped[str] = mapped_column(Text)
    sub: Mapped[str] = mapped_column(Text)
    csrf_secret: Mapped[bytes] = mapped_column(LargeBinary(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
