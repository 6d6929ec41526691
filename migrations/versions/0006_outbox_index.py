"""webhook_outbox: drop the single-column client index that the (client, id) index already covers.

Every terminal transition inserts an outbox row, so each index on the table is written on the hot
path. ``ix_webhook_outbox_client_id`` (server_client_id, id) from 0005 serves every query and the
foreign-key cascade that ``ix_webhook_outbox_server_client_id`` (server_client_id) did. Dropped
(and, on downgrade, rebuilt) concurrently so outbox writes never wait.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from service.db.migrate import create_index_concurrently, drop_index_concurrently

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_index_concurrently("ix_webhook_outbox_server_client_id", "webhook_outbox")


def downgrade() -> None:
    create_index_concurrently("ix_webhook_outbox_server_client_id", "webhook_outbox", ["server_client_id"])
