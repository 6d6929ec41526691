"""Admin tokens, the admin audit log, rate-limit counters, webhook delivery leases and admin indexes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "admin_tokens",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("last_used_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("role IN ('viewer', 'operator', 'admin')", name=op.f("ck_admin_tokens_role")),
        sa.UniqueConstraint("token_hash", name="uq_admin_tokens_token_hash"),
    )

    op.create_table(
        "admin_audit_log",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column(
            "admin_token_id",
            sa.Uuid(),
            sa.ForeignKey(
                "admin_tokens.id", ondelete="SET NULL", name="fk_admin_audit_log_admin_token_id_admin_tokens"
            ),
        ),
        sa.Column("actor", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16)),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("method", sa.String(8)),
        sa.Column("route", sa.Text()),
        sa.Column("target", sa.Text()),
        sa.Column("status", sa.Integer()),
        sa.Column("detail", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
    )
    op.create_index("ix_admin_audit_log_admin_token_id", "admin_audit_log", ["admin_token_id", "id"])

    op.create_table(
        "rate_limit_counters",
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name="fk_rate_limit_counters_server_client_id_server_clients"
            ),
            primary_key=True,
        ),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
    )

    # Webhook delivery: a lease makes "at most one delivery in flight per event" hold across
    # replicas; retry_from starts the give-up clock (reset by a replay).
    op.add_column("webhook_outbox", sa.Column("lease_until", sa.DateTime(timezone=True)))
    op.add_column("webhook_outbox", sa.Column("last_attempt_at", sa.DateTime(timezone=True)))
    op.add_column(
        "webhook_outbox", sa.Column("retry_from", sa.DateTime(timezone=True), nullable=False, server_default=_now)
    )
    op.create_index("ix_webhook_outbox_client_id", "webhook_outbox", ["server_client_id", "id"])

    # Admin listing: keyset pagination orders by the UUIDv7 id; each filter has an (x, id) index so
    # "WHERE x = :v AND id < :cursor ORDER BY id DESC LIMIT n" is an index range scan at any size.
    op.create_index("ix_flows_status_id", "flows", ["status", "id"])
    op.create_index("ix_flows_kind_id", "flows", ["kind", "id"])
    op.create_index("ix_flows_provider_id", "flows", ["provider", "id"])
    op.create_index("ix_flows_created_at", "flows", ["created_at"])
    op.create_index("ix_flows_expires_at", "flows", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_flows_expires_at", "flows")
    op.drop_index("ix_flows_created_at", "flows")
    op.drop_index("ix_flows_provider_id", "flows")
    op.drop_index("ix_flows_kind_id", "flows")
    op.drop_index("ix_flows_status_id", "flows")
    op.drop_index("ix_webhook_outbox_client_id", "webhook_outbox")
    op.drop_column("webhook_outbox", "retry_from")
    op.drop_column("webhook_outbox", "last_attempt_at")
    op.drop_column("webhook_outbox", "lease_until")
    op.drop_table("rate_limit_counters")
    op.drop_table("admin_audit_log")
    op.drop_table("admin_tokens")
