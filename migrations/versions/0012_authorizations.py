"""Authorizations: a connection holds one or more token sets, each with exactly its own scopes.

Until now a connection (a subject's account at a provider) held one token set, and every server client
granted the connection was handed it, whatever its grant said. From here the token set lives in
``authorizations``, one row per set the provider issued, and each grant points at one of them
(``grants.authorization_id``): the token endpoint hands a client only its grant's authorization.

Existing OAuth connections become one authorization each, **with the connection's own id**: the
tokens were sealed with the owner string ``cn_<id>`` and the connection's subject, provider and
account bound beside it (``service.crypto.columns``), and an authorization seals its tokens with
``cn_<its id>`` and the same four fields, which it carries itself. So the ciphertext is copied as
it is (a migration has no keys) and still opens, and no two authorizations share an owner string:
a token copied into another authorization's row does not open there. Their grants point at them.
API-key connections keep their one secret on the connection row and their grants point at no
authorization.

``grants`` also gains a MAC under a vault sub-key (``grants.mac``), written by the service; rows
from before this revision have none until ``elicitd keys rotate`` writes it (docs/security.md).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "authorizations",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("connection_id", postgresql.UUID(as_uuid=True), nullable=False),
        # Whose the tokens are: written once, bound into the tokens' associated data.
        sa.Column("subject_iss", sa.Text(), nullable=False),
        sa.Column("subject_sub", sa.Text(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("account_id", sa.Text(), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("token_type", sa.String(32), nullable=False, server_default=sa.text("'Bearer'")),
        sa.Column("access_token_enc", sa.LargeBinary()),
        sa.Column("access_token_key_id", sa.String(32)),
        sa.Column("refresh_token_enc", sa.LargeBinary()),
        sa.Column("refresh_token_key_id", sa.String(32)),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("status", sa.String(32), nullable=False, server_default=sa.text("'active'")),
        sa.Column("refreshed_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("refresh_claim", postgresql.UUID(as_uuid=True)),
        sa.Column("refresh_claimed_until", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint(
            "status IN ('active', 'reauthorization_required', 'revoked')", name=op.f("ck_authorizations_status")
        ),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["connections.id"],
            name=op.f("fk_authorizations_connection_id_connections"),
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_authorizations_connection", "authorizations", ["connection_id", "status"])
    op.execute(
        """
        INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, scopes,
                                    token_type, access_token_enc, access_token_key_id, refresh_token_enc,
                                    refresh_token_key_id, expires_at, status, refreshed_at, revoked_at,
                                    created_at, updated_at)
        SELECT c.id, c.id, c.subject_iss, c.subject_sub, c.provider, c.account_id, c.scopes, c.token_type,
               c.access_token_enc, c.access_token_key_id, c.refresh_token_enc, c.refresh_token_key_id,
               c.expires_at, c.status, c.refreshed_at, c.revoked_at, c.created_at, c.updated_at
        FROM connections c JOIN providers p ON p.name = c.provider
        WHERE p.auth_type = 'oauth2'
        """
    )
    op.execute(
        "UPDATE connections c SET access_token_enc = NULL, access_token_key_id = NULL, refresh_token_enc = NULL, "
        "refresh_token_key_id = NULL, refresh_claim = NULL, refresh_claimed_until = NULL "
        "WHERE EXISTS (SELECT 1 FROM authorizations a WHERE a.id = c.id)"
    )
    op.add_column("connections", sa.Column("connected_by", postgresql.UUID(as_uuid=True)))
    op.create_foreign_key(
        op.f("fk_connections_connected_by_server_clients"),
        "connections",
        "server_clients",
        ["connected_by"],
        ["id"],
        ondelete="SET NULL",
    )
    # Who connected an existing account: the client of the oldest grant its connect flow made.
    op.execute(
        "UPDATE connections c SET connected_by = (SELECT g.server_client_id FROM grants g WHERE g.connection_id = c.id "
        "AND g.origin IN ('flow', 'migration') AND g.server_client_id IS NOT NULL ORDER BY g.created_at, g.id LIMIT 1)"
    )
    op.add_column("grants", sa.Column("authorization_id", postgresql.UUID(as_uuid=True)))
    op.create_foreign_key(
        op.f("fk_grants_authorization_id_authorizations"),
        "grants",
        "authorizations",
        ["authorization_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.add_column("grants", sa.Column("mac", sa.LargeBinary()))
    op.add_column("grants", sa.Column("mac_key_id", sa.String(32)))
    op.execute(
        "UPDATE grants g SET authorization_id = g.connection_id "
        "WHERE EXISTS (SELECT 1 FROM authorizations a WHERE a.id = g.connection_id)"
    )
    op.create_index("ix_grants_authorization_id", "grants", ["authorization_id"])
    # The grants made before this revision, for ``elicitd keys rotate`` to MAC (service.crypto.rotate).
    op.execute("UPDATE grants SET mac_key_id = 'legacy' WHERE mac IS NULL")


def downgrade() -> None:
    # Back to one token set per connection: the oldest live authorization's (others are lost;
    # their grants keep the connection, as before this revision).
    op.execute(
        """
        UPDATE connections c SET scopes = a.scopes, token_type = a.token_type,
               access_token_enc = a.access_token_enc, access_token_key_id = a.access_token_key_id,
               refresh_token_enc = a.refresh_token_enc, refresh_token_key_id = a.refresh_token_key_id,
               expires_at = a.expires_at
          FROM authorizations a
         WHERE a.id = c.id
        """
    )
    op.drop_index("ix_grants_authorization_id", table_name="grants")
    op.drop_constraint(op.f("fk_grants_authorization_id_authorizations"), "grants", type_="foreignkey")
    op.drop_column("grants", "mac_key_id")
    op.drop_column("grants", "mac")
    op.drop_column("grants", "authorization_id")
    op.drop_constraint(op.f("fk_connections_connected_by_server_clients"), "connections", type_="foreignkey")
    op.drop_column("connections", "connected_by")
    op.drop_index("ix_authorizations_connection", table_name="authorizations")
    op.drop_table("authorizations")
