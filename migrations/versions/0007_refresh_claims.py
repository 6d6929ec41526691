"""connections: a refresh claim, so no provider call happens while a row lock or connection is held.

A token refresh used to hold ``SELECT … FOR UPDATE`` (and so a pooled connection) across the call
to the provider. Now one replica claims the refresh with a short conditional ``UPDATE`` that sets
``refresh_claim`` (a random id of this attempt) and ``refresh_claimed_until`` (database clock), calls
the provider holding nothing, and writes the result only while the claim is still its own. Both
columns are nullable without a default, so adding them rewrites nothing and holds the table's lock
only for the catalog change.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("connections", sa.Column("refresh_claim", sa.Uuid()))
    op.add_column("connections", sa.Column("refresh_claimed_until", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("connections", "refresh_claimed_until")
    op.drop_column("connections", "refresh_claim")
