"""provider_parameters: connection parameters and token metadata.

A catalog entry whose endpoints are templated from connection parameters (Shopify's ``{shop}``,
Zendesk's ``{subdomain}``) is connected with the values the MCP server gave or the person typed:
the pending state carries them from the connect page to the callback, and the connection and its
authorizations keep them (a refresh and a revocation go to the same shop). An authorization also
keeps the non-secret values its provider named beside the tokens (Salesforce's ``instance_url``,
Zoho's ``accounts-server``, Xero's tenant id): the token endpoint hands them to the MCP server.

Each column is added with a constant default, which PostgreSQL 11+ records in the catalog
without rewriting the table, so the ``ACCESS EXCLUSIVE`` lock lasts milliseconds.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("oauth_states", "parameters"),
    ("connections", "parameters"),
    ("authorizations", "parameters"),
    ("authorizations", "metadata"),
)


def upgrade() -> None:
    for table, column in _COLUMNS:
        op.add_column(table, sa.Column(column, JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")))


def downgrade() -> None:
    for table, column in reversed(_COLUMNS):
        op.drop_column(table, column)
