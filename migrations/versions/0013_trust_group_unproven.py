"""trust_groups: whether members without subject proof are allowed.

A member whose ``subject_proof`` is ``none`` names any user with its API key alone, so in a group it
reads every grant the group holds on that key alone. Joining such a client to a group now needs
the operator to say so for that group (``allow_unproven``). The column is added with the default
false (stored in the catalog: no table rewrite); groups that already have such a member when this
runs get true, so what worked keeps working and every place an operator looks now flags them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-09
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "trust_groups", sa.Column("allow_unproven", sa.Boolean(), nullable=False, server_default=sa.text("false"))
    )
    op.execute(
        "UPDATE trust_groups SET allow_unproven = true WHERE id IN ("
        "SELECT m.group_id FROM trust_group_members m JOIN server_clients sc ON sc.id = m.server_client_id "
        "WHERE sc.subject_proof = 'none')"
    )


def downgrade() -> None:
    op.drop_column("trust_groups", "allow_unproven")
