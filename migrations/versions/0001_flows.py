"""Server clients, API keys, flows, flow events and the webhook outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "server_clients",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("allowed_providers", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("trusted_issuers", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("webhook_url", sa.Text()),
        sa.Column("webhook_secret_enc", sa.LargeBinary()),
        sa.Column("webhook_secret_key_id", sa.String(32)),
        sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("flows_per_minute", sa.Integer()),
        sa.Column("pending_per_subject", sa.Integer()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("name", name="uq_server_clients_name"),
    )
    op.create_table(
        "server_client_keys",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name="fk_server_client_keys_server_client_id_server_clients"
            ),
            nullable=False,
        ),
        sa.Column("key_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("key_hash", name="uq_server_client_keys_key_hash"),
    )
    op.create_index("ix_server_client_keys_server_client_id", "server_client_keys", ["server_client_id"])

    op.create_table(
        "flows",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey("server_clients.id", ondelete="RESTRICT", name="fk_flows_server_client_id_server_clients"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject_iss", sa.Text(), nullable=False),
        sa.Column("subject_sub", sa.Text(), nullable=False),
        sa.Column("provider", sa.String(64)),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("params", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("context", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("reuse_key", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("external_url", sa.Text()),
        sa.Column("status", sa.String(16), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("result", postgresql.JSONB()),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text()),
        sa.Column("connection_id", sa.Uuid()),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.CheckConstraint(
            "status IN ('pending', 'completed', 'declined', 'cancelled', 'expired', 'failed')",
            name=op.f("ck_flows_status"),
        ),
        sa.CheckConstraint(
            "kind IN ('oauth_connect', 'api_key', 'consent', 'payment', 'external')", name=op.f("ck_flows_kind")
        ),
    )
    op.create_index(
        "uq_flows_pending_reuse",
        "flows",
        ["server_client_id", "subject_iss", "subject_sub", "kind", "reuse_key"],
        unique=True,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index("ix_flows_pending_expiry", "flows", ["expires_at"], postgresql_where=sa.text("status = 'pending'"))
    op.create_index("ix_flows_subject", "flows", ["subject_iss", "subject_sub", "id"])
    op.create_index("ix_flows_client_id", "flows", ["server_client_id", "id"])

    op.create_table(
        "flow_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column(
            "flow_id",
            sa.Uuid(),
            sa.ForeignKey("flows.id", ondelete="CASCADE", name="fk_flow_events_flow_id_flows"),
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("type", sa.String(48), nullable=False),
        sa.Column("actor", sa.String(16), nullable=False),
        sa.Column("from_status", sa.String(16)),
        sa.Column("to_status", sa.String(16)),
        sa.Column("detail", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
    )
    op.create_index("ix_flow_events_flow", "flow_events", ["flow_id", "id"])

    op.create_table(
        "webhook_outbox",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name="fk_webhook_outbox_server_client_id_server_clients"
            ),
            nullable=False,
        ),
        sa.Column(
            "flow_id",
            sa.Uuid(),
            sa.ForeignKey("flows.id", ondelete="CASCADE", name="fk_webhook_outbox_flow_id_flows"),
            nullable=False,
        ),
        sa.Column("event_type", sa.String(48), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("last_status", sa.Integer()),
        sa.Column("last_error", sa.Text()),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("abandoned_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    )
    op.create_index("ix_webhook_outbox_server_client_id", "webhook_outbox", ["server_client_id"])
    op.create_index("ix_webhook_outbox_flow_id", "webhook_outbox", ["flow_id"])
    op.create_index(
        "ix_webhook_outbox_due",
        "webhook_outbox",
        ["next_attempt_at"],
        postgresql_where=sa.text("delivered_at IS NULL AND abandoned_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("webhook_outbox")
    op.drop_table("flow_events")
    op.drop_table("flows")
    op.drop_table("server_client_keys")
    op.drop_table("server_clients")
