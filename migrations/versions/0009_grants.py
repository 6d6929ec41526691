"""grants and trust groups: who may use a connection; grants for the clients that made each one.

Until now any server client allowed a provider could read any subject's connection to it. From
here on a connection serves only grantees the subject approved (DESIGN §10). So that nothing that
works today breaks for the clients the users actually approved, existing connections get a grant
for every server client whose *completed* ``oauth_connect`` or ``api_key`` flow created or
reconnected them (``flows.connection_id``, or the ``connection_id`` in the flow's result). The
grant covers the scopes those flows asked for, as far as the connection holds them (all of the
connection's scopes when the flows named none). A connection whose creator cannot be traced (its
flows were deleted by retention, or it was written by hand) gets no grant: the next client to ask
gets a grant page, and an operator can grant through the admin API (audited).

Locking: the new tables are created without their foreign keys to existing tables, the history is
read (a scan of ``flows``, which takes no lock that writers wait on), and only then are the foreign
keys added; each ``ADD CONSTRAINT`` holds its referenced table's SHARE ROW EXCLUSIVE lock from
there to the commit — the time to check the new rows, not the time of the scan.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_now = sa.text("now()")

# One pass over the flow history: each completed connect or API-key flow names the connection it
# made, and the client that asked is granted what its flows asked for.
_GRANTS_FROM_HISTORY = """
WITH made AS (
    SELECT f.id AS flow_id, f.server_client_id, f.completed_at, f.scopes,
           COALESCE(
               f.connection_id,
               CASE WHEN f.result->>'connection_id' ~ '^cn_[0-9a-f]{32}$'
                    THEN CAST(substr(f.result->>'connection_id', 4) AS uuid) END
           ) AS connection_id
    FROM flows f
    WHERE f.status = 'completed' AND f.kind IN ('oauth_connect', 'api_key')
), per_client AS (
    SELECT m.connection_id, m.server_client_id,
           (array_agg(m.flow_id ORDER BY m.completed_at DESC, m.flow_id DESC))[1] AS flow_id,
           ARRAY(SELECT DISTINCT s FROM made m2, unnest(m2.scopes) AS s
                 WHERE m2.connection_id = m.connection_id AND m2.server_client_id = m.server_client_id) AS asked
    FROM made m
    WHERE m.connection_id IS NOT NULL
    GROUP BY m.connection_id, m.server_client_id
)
INSERT INTO grants (id, connection_id, server_client_id, scopes, origin, flow_id)
SELECT gen_random_uuid(), p.connection_id, p.server_client_id,
       CASE WHEN cardinality(p.asked) = 0 THEN c.scopes
            ELSE ARRAY(SELECT unnest(p.asked) INTERSECT SELECT unnest(c.scopes) ORDER BY 1) END,
       'migration', p.flow_id
FROM per_client p
JOIN connections c ON c.id = p.connection_id AND c.status <> 'revoked'
JOIN server_clients sc ON sc.id = p.server_client_id
"""


def upgrade() -> None:
    op.create_table(
        "trust_groups",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("name", name=op.f("uq_trust_groups_name")),
    )
    op.create_table(
        "trust_group_members",
        sa.Column("server_client_id", sa.Uuid(), primary_key=True),
        sa.Column(
            "group_id",
            sa.Uuid(),
            sa.ForeignKey(
                "trust_groups.id", ondelete="CASCADE", name=op.f("fk_trust_group_members_group_id_trust_groups")
            ),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    )
    op.create_index(op.f("ix_trust_group_members_group_id"), "trust_group_members", ["group_id"])
    op.create_table(
        "grants",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("server_client_id", sa.Uuid()),
        sa.Column(
            "trust_group_id",
            sa.Uuid(),
            sa.ForeignKey("trust_groups.id", ondelete="CASCADE", name=op.f("fk_grants_trust_group_id_trust_groups")),
        ),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("flow_id", sa.Uuid()),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_by", sa.String(16)),
        sa.Column("last_used_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.CheckConstraint("num_nonnulls(server_client_id, trust_group_id) = 1", name=op.f("ck_grants_one_grantee")),
        sa.CheckConstraint("origin IN ('flow', 'migration', 'admin')", name=op.f("ck_grants_origin")),
    )
    op.create_index(
        "uq_grants_live_client",
        "grants",
        ["connection_id", "server_client_id"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL AND server_client_id IS NOT NULL"),
    )
    op.create_index(
        "uq_grants_live_group",
        "grants",
        ["connection_id", "trust_group_id"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL AND trust_group_id IS NOT NULL"),
    )
    op.create_index(op.f("ix_grants_server_client_id"), "grants", ["server_client_id"])
    op.create_index(op.f("ix_grants_trust_group_id"), "grants", ["trust_group_id"])
    op.create_index(op.f("ix_grants_flow_id"), "grants", ["flow_id"])

    # The history scan may take longer than the migration's usual bound on a large flows table; it
    # holds no lock a writer waits for, and the bound is restored for the statements that do. Saved
    # and restored in SQL, so that the offline (--sql) script does the same.
    op.execute("SELECT set_config('elicitd.saved_statement_timeout', current_setting('statement_timeout'), true)")
    op.execute("SET LOCAL statement_timeout = '10min'")
    op.execute(_GRANTS_FROM_HISTORY)
    op.execute("SELECT set_config('statement_timeout', current_setting('elicitd.saved_statement_timeout'), true)")

    op.create_foreign_key(
        op.f("fk_trust_group_members_server_client_id_server_clients"),
        "trust_group_members",
        "server_clients",
        ["server_client_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        op.f("fk_grants_connection_id_connections"),
        "grants",
        "connections",
        ["connection_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        op.f("fk_grants_server_client_id_server_clients"),
        "grants",
        "server_clients",
        ["server_client_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(op.f("fk_grants_flow_id_flows"), "grants", "flows", ["flow_id"], ["id"], ondelete="SET NULL")


def downgrade() -> None:
    op.drop_table("grants")
    op.drop_table("trust_group_members")
    op.drop_table("trust_groups")
