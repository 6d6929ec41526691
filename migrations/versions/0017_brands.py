"""brands: a server client's (or a trust group's) logo, accent colours, support link and line of text.

A new table only; no existing row changes. A brand belongs to exactly one owner, and each owner
has at most one brand. The logo is kept as elicitd re-encoded it, with its SHA-256, which is the
URL the pages link (``/brand/logo/<sha256>.png``); the stylesheet the accents make is linked by
its own SHA-256 the same way.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "brands",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name=op.f("fk_brands_server_client_id_server_clients")
            ),
        ),
        sa.Column(
            "trust_group_id",
            sa.Uuid(),
            sa.ForeignKey("trust_groups.id", ondelete="CASCADE", name=op.f("fk_brands_trust_group_id_trust_groups")),
        ),
        sa.Column("accent", sa.String(7)),
        sa.Column("accent_dark", sa.String(7)),
        sa.Column("style_sha256", sa.String(64)),
        sa.Column("logo_png", sa.LargeBinary()),
        sa.Column("logo_sha256", sa.String(64)),
        sa.Column("logo_width", sa.Integer()),
        sa.Column("logo_height", sa.Integer()),
        sa.Column("support_url", sa.Text()),
        sa.Column("tagline", sa.String(200)),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("num_nonnulls(server_client_id, trust_group_id) = 1", name=op.f("ck_brands_one_owner")),
        sa.CheckConstraint("(logo_png IS NULL) = (logo_sha256 IS NULL)", name=op.f("ck_brands_logo_pair")),
        sa.CheckConstraint("accent IS NULL OR accent ~ '^#[0-9a-f]{6}$'", name=op.f("ck_brands_accent_hex")),
        sa.CheckConstraint(
            "accent_dark IS NULL OR accent_dark ~ '^#[0-9a-f]{6}$'", name=op.f("ck_brands_accent_dark_hex")
        ),
    )
    op.create_index(op.f("uq_brands_server_client"), "brands", ["server_client_id"], unique=True)
    op.create_index(op.f("uq_brands_trust_group"), "brands", ["trust_group_id"], unique=True)
    op.create_index(op.f("ix_brands_logo_sha256"), "brands", ["logo_sha256"])
    op.create_index(op.f("ix_brands_style_sha256"), "brands", ["style_sha256"])


def downgrade() -> None:
    op.drop_table("brands")
