"""Providers, OAuth states and connections (the token vault).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "providers",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("catalog", sa.String(64)),
        sa.Column("issuer", sa.Text()),
        sa.Column("discovery_url", sa.Text()),
        sa.Column("authorization_endpoint", sa.Text()),
        sa.Column("token_endpoint", sa.Text()),
        sa.Column("revocation_endpoint", sa.Text()),
        sa.Column("account_endpoint", sa.Text()),
        sa.Column("account_id_field", sa.String(64), nullable=False, server_default=sa.text("'id'")),
        sa.Column("account_login_field", sa.String(64)),
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("client_secret_enc", sa.LargeBinary()),
        sa.Column("client_secret_key_id", sa.String(32)),
        sa.Column("token_auth_method", sa.String(32), nullable=False, server_default=sa.text("'client_secret_basic'")),
        sa.Column("default_scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("scope_descriptions", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("scope_separator", sa.String(4), nullable=False, server_default=sa.text("' '")),
        sa.Column("authorize_params", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.CheckConstraint(
            "token_auth_method IN ('client_secret_basic', 'client_secret_post', 'none')",
            name=op.f("ck_providers_token_auth_method"),
        ),
    )

    op.create_table(
        "connections",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("subject_iss", sa.Text(), nullable=False),
        sa.Column("subject_sub", sa.Text(), nullable=False),
        sa.Column(
            "provider",
            sa.String(64),
            sa.ForeignKey(
                "providers.name", ondelete="RESTRICT", onupdate="CASCADE", name="fk_connections_provider_providers"
            ),
            nullable=False,
        ),
        sa.Column("account_id", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("account_login", sa.Text()),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("token_type", sa.String(32), nullable=False, server_default=sa.text("'Bearer'")),
        sa.Column("access_token_enc", sa.LargeBinary()),
        sa.Column("access_token_key_id", sa.String(32)),
        sa.Column("refresh_token_enc", sa.LargeBinary()),
        sa.Column("refresh_token_key_id", sa.String(32)),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("status", sa.String(32), nullable=False, server_default=sa.text("'active'")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("refreshed_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint(
            "status IN ('active', 'reauthorization_required', 'revoked')", name=op.f("ck_connections_status")
        ),
    )
    # One live connection per (subject, provider, provider account); revoked rows stay as history.
    op.create_index(
        "uq_connections_live_account",
        "connections",
        ["subject_iss", "subject_sub", "provider", "account_id"],
        unique=True,
        postgresql_where=sa.text("status <> 'revoked'"),
    )
    op.create_index("ix_connections_subject", "connections", ["subject_iss", "subject_sub", "provider", "id"])

    op.create_table(
        "oauth_states",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("state_hash", sa.LargeBinary(32), nullable=False),
        sa.Column(
            "flow_id",
            sa.Uuid(),
            sa.ForeignKey("flows.id", ondelete="CASCADE", name="fk_oauth_states_flow_id_flows"),
            nullable=False,
        ),
        # The browser session that asked; the state dies with it.
        sa.Column(
            "browser_session_id",
            sa.LargeBinary(32),
            sa.ForeignKey(
                "browser_sessions.id", ondelete="CASCADE", name="fk_oauth_states_browser_session_id_browser_sessions"
            ),
            nullable=False,
        ),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("verifier_enc", sa.LargeBinary(), nullable=False),
        sa.Column("verifier_key_id", sa.String(32), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("state_hash", name="uq_oauth_states_state_hash"),
    )
    op.create_index("ix_oauth_states_flow_id", "oauth_states", ["flow_id"])
    op.create_index("ix_oauth_states_expires_at", "oauth_states", ["expires_at"])


def downgrade() -> None:
    op.drop_table("oauth_states")
    op.drop_table("connections")
    op.drop_table("providers")
