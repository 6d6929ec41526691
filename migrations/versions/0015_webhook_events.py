"""server_clients.webhook_events: which event types a client's webhook receives.

NULL (every existing row, and the default) keeps what was: every event type that is delivered by
webhook. A list limits the webhook to those types; the event stream is not filtered. The outbox
rows are written by the statement that makes the change (a flow's transition, a connection's
health change), and that statement reads the filter, so a type left out is never queued.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("server_clients", sa.Column("webhook_events", postgresql.ARRAY(sa.Text())))


def downgrade() -> None:
    op.drop_column("server_clients", "webhook_events")
