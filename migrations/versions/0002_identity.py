"""Issuers, browser sessions and login attempts (the browser identity check).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "issuers",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("issuer", sa.Text(), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("client_secret_enc", sa.LargeBinary()),
        sa.Column("client_secret_key_id", sa.String(32)),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{openid}'")),
        sa.Column("authorization_endpoint", sa.Text()),
        sa.Column("token_endpoint", sa.Text()),
        sa.Column("jwks_uri", sa.Text()),
        sa.Column("metadata", postgresql.JSONB()),
        sa.Column("metadata_fetched_at", sa.DateTime(timezone=True)),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("issuer", name="uq_issuers_issuer"),
        # A secret and its key id exist together or not at all.
        sa.CheckConstraint(
            "(client_secret_enc IS NULL) = (client_secret_key_id IS NULL)", name=op.f("ck_issuers_secret_pair")
        ),
    )
    op.create_table(
        "login_attempts",
        sa.Column("id", sa.LargeBinary(32), primary_key=True),
        sa.Column(
            "issuer_id",
            sa.Uuid(),
            sa.ForeignKey("issuers.id", ondelete="CASCADE", name="fk_login_attempts_issuer_id_issuers"),
            nullable=False,
        ),
        sa.Column("browser_binding", sa.LargeBinary(32), nullable=False),
        sa.Column("secrets_enc", sa.LargeBinary(), nullable=False),
        sa.Column("secrets_key_id", sa.String(32), nullable=False),
        sa.Column("return_to", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_login_attempts_expires_at", "login_attempts", ["expires_at"])
    op.create_table(
        "browser_sessions",
        sa.Column("id", sa.LargeBinary(32), primary_key=True),
        sa.Column(
            "issuer_id",
            sa.Uuid(),
            sa.ForeignKey("issuers.id", ondelete="CASCADE", name="fk_browser_sessions_issuer_id_issuers"),
            nullable=False,
        ),
        sa.Column("iss", sa.Text(), nullable=False),
        sa.Column("sub", sa.Text(), nullable=False),
        sa.Column("csrf_secret", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    )
    op.create_index("ix_browser_sessions_expires_at", "browser_sessions", ["expires_at"])
    op.create_index("ix_browser_sessions_subject", "browser_sessions", ["iss", "sub"])


def downgrade() -> None:
    op.drop_table("browser_sessions")
    op.drop_table("login_attempts")
    op.drop_table("issuers")
