"""Retention: indexes that let the sweeper find what has outlived its retention window.

Each is partial where it can be, so it holds only the rows retention still has to visit: a flow
whose ``result`` is still held, an outbox row that was delivered. The admin audit log gets a plain
index on ``at``. Built (and, on downgrade, dropped) concurrently so requests never wait.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from sqlalchemy import text

from service.db.migrate import create_index_concurrently, drop_index_concurrently

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_index_concurrently(
        "ix_flows_result_held", "flows", ["completed_at"], postgresql_where=text("result IS NOT NULL")
    )
    create_index_concurrently(
        "ix_webhook_outbox_delivered",
        "webhook_outbox",
        ["delivered_at"],
        postgresql_where=text("delivered_at IS NOT NULL"),
    )
    create_index_concurrently("ix_admin_audit_log_at", "admin_audit_log", ["at"])


def downgrade() -> None:
    drop_index_concurrently("ix_admin_audit_log_at", "admin_audit_log")
    drop_index_concurrently("ix_webhook_outbox_delivered", "webhook_outbox")
    drop_index_concurrently("ix_flows_result_held", "flows")
