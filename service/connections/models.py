"""Providers (third-party OAuth APIs), connections, their authorizations (the token vault) and
pending OAuth states.

Mirrors ``migrations/versions/0003_connections.py`` (0007, the refresh claim; 0012, the
authorizations; 0014, health; 0022, connection parameters and token metadata); the app never
calls ``create_all``. Every secret column is ciphertext from
``service.crypto.vault.Vault`` with its ``*_key_id`` beside it.
"""

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

ACTIVE = "active"
REAUTHORIZATION_REQUIRED = "reauthorization_required"
REVOKED = "revoked"

# Health (migration 0014): what an operator, a server and a person read about a connection.
HEALTHY = "healthy"
EXPIRING = "expiring"  # works, but a person must act soon (the refresh token nears its end)
NEEDS_REAUTHORIZATION = "needs_reauthorization"
HEALTH_REVOKED = "revoked"
HEALTH_STATES = (HEALTHY, EXPIRING, NEEDS_REAUTHORIZATION, HEALTH_REVOKED)
_HEALTH_CHECK = "health IN ('healthy', 'expiring', 'needs_reauthorization', 'revoked')"
# The probe passes' order: least recently checked first, never checked before all (0019).
_PROBE_ORDER = text("COALESCE(checked_at, '-infinity'::timestamp with time zone)")


class HealthColumns:
    """``health`` with its reason and timestamps, on an authorization and (as the summary of its
    live authorizations: the worst one's) on its connection."""

    health: Mapped[str] = mapped_column(String(32), server_default=text("'healthy'"))
    # A stable code: the provider's OAuth error (``invalid_grant``), ``http_<status>``,
    # ``refresh_token_expired``, ``access_token_expired``, ``revoked_by_<who>`` …
    health_reason: Mapped[str | None] = mapped_column(String(64))
    health_http_status: Mapped[int | None] = mapped_column(Integer)
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When the refresh token itself ends (``refresh_token_expires_in``), when the provider says.
    refresh_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TokenColumns:
    """A token set's columns, alike on an authorization and on a connection (where an API-key
    connection keeps its one secret, and an OAuth one the summary of its authorizations). Every
    secret is ciphertext with its key id beside it; a column left NULL holds nothing."""

    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    token_type: Mapped[str] = mapped_column(String(32), server_default=text("'Bearer'"))
    access_token_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    access_token_key_id: Mapped[str | None] = mapped_column(String(32))
    refresh_token_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    refresh_token_key_id: Mapped[str | None] = mapped_column(String(32))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(32), server_default=text("'active'"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    refreshed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A refresh in progress: which attempt claimed it, and until when (database clock). Set and
    # cleared by single conditional statements (``service.connections.refresh``; migration 0007).
    refresh_claim: Mapped[uuid.UUID | None] = mapped_column()
    refresh_claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Provider(Timestamps, Base):
    __tablename__ = "providers"
    __table_args__ = (
        CheckConstraint(
            "token_auth_method IN ('client_secret_basic', 'client_secret_post', 'none')", name="token_auth_method"
        ),
        CheckConstraint("auth_type IN ('oauth2', 'api_key')", name="auth_type"),
    )

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(200))
    catalog: Mapped[str | None] = mapped_column(String(64))
    issuer: Mapped[str | None] = mapped_column(Text)
    discovery_url: Mapped[str | None] = mapped_column(Text)
    authorization_endpoint: Mapped[str | None] = mapped_column(Text)
    token_endpoint: Mapped[str | None] = mapped_column(Text)
    revocation_endpoint: Mapped[str | None] = mapped_column(Text)
    account_endpoint: Mapped[str | None] = mapped_column(Text)
    account_id_field: Mapped[str] = mapped_column(String(64), server_default=text("'id'"))
    account_login_field: Mapped[str | None] = mapped_column(String(64))
    client_id: Mapped[str] = mapped_column(Text)
    client_secret_enc: Mapped[bytes | None] = mapped_column(LargeBinary)
    client_secret_key_id: Mapped[str | None] = mapped_column(String(32))
    token_auth_method: Mapped[str] = mapped_column(String(32), server_default=text("'client_secret_basic'"))
    default_scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    scope_descriptions: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    scope_separator: Mapped[str] = mapped_column(String(4), server_default=text("' '"))
    authorize_params: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    # 'oauth2', or 'api_key' for providers whose secret the user types (service/apikeys).
    auth_type: Mapped[str] = mapped_column(String(16), server_default=text("'oauth2'"))
    api_key_config: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Connection(TokenColumns, HealthColumns, Timestamps, Base):
    """One account of one subject at one provider. An OAuth connection's tokens live in its
    ``Authorization`` rows (one per token set the provider issued, each with exactly its scopes);
    ``scopes`` and ``status`` here summarise them (``repository.sync_connection``). An API-key
    connection keeps its one secret in the token columns of this row."""

    __tablename__ = "connections"
    __table_args__ = (
        CheckConstraint("status IN ('active', 'reauthorization_required', 'revoked')", name="status"),
        CheckConstraint(_HEALTH_CHECK, name="health"),
        Index(
            "uq_connections_live_account",
            "subject_iss",
            "subject_sub",
            "provider",
            "account_id",
            unique=True,
            postgresql_where=text("status <> 'revoked'"),
        ),
        Index("ix_connections_subject", "subject_iss", "subject_sub", "provider", "id"),
        # The probe pass's API-key half (migration 0019; ``service.connections.key_probes``).
        Index(
            "ix_connections_key_probe",
            _PROBE_ORDER,
            "id",
            postgresql_where=text("status = 'active' AND token_type = 'api_key'"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    subject_iss: Mapped[str] = mapped_column(Text)
    subject_sub: Mapped[str] = mapped_column(Text)
    provider: Mapped[str] = mapped_column(
        String(64), ForeignKey("providers.name", ondelete="RESTRICT", onupdate="CASCADE")
    )
    account_id: Mapped[str] = mapped_column(Text, server_default=text("''"))
    account_login: Mapped[str | None] = mapped_column(Text)
    # Non-secret values entered beside an API key (such as a region); see service/apikeys.
    fields: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    # The server client whose flow connected the account (migration 0012): it, or the user,
    # disconnects the account for everyone; a server only granted it ends its own grant.
    connected_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("server_clients.id", ondelete="SET NULL"))
    # The connection parameters its endpoints were filled from (Shopify's ``shop``), each checked
    # by the catalog entry's pattern (migration 0022); never secret.
    parameters: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))


class Authorization(TokenColumns, HealthColumns, Timestamps, Base):
    """One token set the provider issued for a connection, with exactly the scopes it granted.

    A grant points at one authorization, and the token endpoint hands a server client only that
    authorization's token. Refreshed, rotated and revoked on its own. The subject, provider and
    account are copies of the connection's, written once: they are bound into the tokens'
    associated data (with the owner ``cn_<this id>``), so a token moved to another row, person,
    provider or account does not open (``service.crypto.columns``)."""

    __tablename__ = "authorizations"
    __table_args__ = (
        CheckConstraint("status IN ('active', 'reauthorization_required', 'revoked')", name="status"),
        CheckConstraint(_HEALTH_CHECK, name="health"),
        # Health follows status where status decides (0014).
        CheckConstraint(
            "(status = 'reauthorization_required') = (health = 'needs_reauthorization') "
            "AND (status = 'revoked') = (health = 'revoked')",
            name="health_follows_status",
        ),
        Index("ix_authorizations_connection", "connection_id", "status"),
        # The proactive refresh pass's reads (migration 0016).
        Index("ix_authorizations_due", "expires_at", postgresql_where=text("status = 'active'")),
        Index(
            "ix_authorizations_refresh_ends",
            "refresh_expires_at",
            postgresql_where=text("status = 'active' AND refresh_expires_at IS NOT NULL"),
        ),
        # The probe pass's reads (migration 0019; ``service.connections.probes``).
        Index("ix_authorizations_probe_due", _PROBE_ORDER, "id", postgresql_where=text("status = 'active'")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id", ondelete="CASCADE"))
    subject_iss: Mapped[str] = mapped_column(Text)
    subject_sub: Mapped[str] = mapped_column(Text)
    provider: Mapped[str] = mapped_column(String(64))
    account_id: Mapped[str] = mapped_column(Text)
    # The connection's parameters, copied when written: a refresh or a revocation goes to the same
    # templated endpoints as the code exchange did (migration 0022).
    parameters: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    # Non-secret values the provider named beside the tokens, as the catalog entry declares them
    # (Salesforce's ``instance_url``, Xero's tenant id): the token endpoint's ``metadata``.
    metadata_: Mapped[dict[str, str]] = mapped_column("metadata", JSONB, server_default=text("'{}'::jsonb"))


class OAuthState(Timestamps, Base):
    """One authorization request in flight. Only the SHA-256 of ``state`` is stored, so a database
    reader cannot forge a callback; the PKCE verifier is vault-encrypted (owner = this row's id)."""

    __tablename__ = "oauth_states"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    state_hash: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    flow_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("flows.id", ondelete="CASCADE"), index=True)
    browser_session_id: Mapped[bytes] = mapped_column(
        LargeBinary(32), ForeignKey("browser_sessions.id", ondelete="CASCADE")
    )
    provider: Mapped[str] = mapped_column(String(64))
    verifier_enc: Mapped[bytes] = mapped_column(LargeBinary)
    verifier_key_id: Mapped[str] = mapped_column(String(32))
    redirect_uri: Mapped[str] = mapped_column(Text)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    # The connection parameters the authorization URL was filled from (migration 0022).
    parameters: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
