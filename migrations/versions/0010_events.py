"""events: the per-server-client event stream behind ``GET /v1/events``.

``event_streams`` holds each server client's last sequence number; ``events`` holds the events
(flow transitions, connection and grant revocations) for the retention window. Both are new, so
creating them and their indexes locks nothing that requests use.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_streams",
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name="fk_event_streams_server_client_id_server_clients"
            ),
            primary_key=True,
        ),
        sa.Column("last_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey("server_clients.id", ondelete="CASCADE", name="fk_events_server_client_id_server_clients"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), primary_key=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(48), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_events_created_at", "events", ["created_at"])


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("event_streams")
