"""server_clients: subject-proof policy and resource URIs; issuers: introspection credentials.

A server client may be required to forward its user's own access token with every call that names
a subject. Clients registered from now on require it (the column's default); the clients that exist
when this runs were created under the old contract, where the API key alone was enough, so they get
'none' and keep working until an operator turns the proof on. The column is first added with the
default 'none' (PostgreSQL stores it in the catalog: no table rewrite, existing rows read 'none'),
then the default becomes 'required' for rows inserted later.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "server_clients", sa.Column("subject_proof", sa.String(16), nullable=False, server_default=sa.text("'none'"))
    )
    op.alter_column("server_clients", "subject_proof", server_default=sa.text("'required'"))
    op.create_check_constraint(
        op.f("ck_server_clients_subject_proof"), "server_clients", "subject_proof IN ('required', 'none')"
    )
    op.add_column(
        "server_clients",
        sa.Column("resource_uris", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
    )
    op.add_column("issuers", sa.Column("introspection_endpoint", sa.Text()))
    op.add_column("issuers", sa.Column("introspection_client_id", sa.Text()))
    op.add_column("issuers", sa.Column("introspection_secret_enc", sa.LargeBinary()))
    op.add_column("issuers", sa.Column("introspection_secret_key_id", sa.String(32)))
    op.create_check_constraint(
        op.f("ck_issuers_introspection_secret_pair"),
        "issuers",
        "(introspection_secret_enc IS NULL) = (introspection_secret_key_id IS NULL)",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_issuers_introspection_secret_pair"), "issuers", type_="check")
    for column in ("introspection_secret_key_id", "introspection_secret_enc", "introspection_client_id"):
        op.drop_column("issuers", column)
    op.drop_column("issuers", "introspection_endpoint")
    op.drop_column("server_clients", "resource_uris")
    op.drop_constraint(op.f("ck_server_clients_subject_proof"), "server_clients", type_="check")
    op.drop_column("server_clients", "subject_proof")
