"""Indexes for the proactive refresh pass (``service.connections.refresher``), built concurrently.

Every replica runs a pass every few seconds: it claims live authorizations whose token expires
soon (``ix_authorizations_due``, on ``expires_at``) and marks those whose refresh token has ended
or soon will (``ix_authorizations_refresh_ends``, on ``refresh_expires_at``). Both are partial
(active rows only, and only rows whose refresh token has an end), so they stay small and the
writes of revoked and reauthorization-required rows never touch them. ``if_not_exists``: an
instance that ran an early 0014, which built the first one in its transaction, keeps it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-10
"""

import sqlalchemy as sa

from service.db.migrate import create_index_concurrently, drop_index_concurrently

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_index_concurrently(
        "ix_authorizations_due",
        "authorizations",
        ["expires_at"],
        postgresql_where=sa.text("status = 'active'"),
        if_not_exists=True,
    )
    create_index_concurrently(
        "ix_authorizations_refresh_ends",
        "authorizations",
        ["refresh_expires_at"],
        postgresql_where=sa.text("status = 'active' AND refresh_expires_at IS NOT NULL"),
        if_not_exists=True,
    )


def downgrade() -> None:
    drop_index_concurrently("ix_authorizations_refresh_ends", "authorizations")
    drop_index_concurrently("ix_authorizations_due", "authorizations")
