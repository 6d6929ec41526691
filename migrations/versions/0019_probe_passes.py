"""Indexes for the health probe passes (``service.connections.probes``), built concurrently.

Every replica runs a probe pass every minute. It claims the live authorizations — and the live
API-key connections — least recently checked, among those not checked for the probe interval:
``COALESCE(checked_at, '-infinity') <= now() - interval ORDER BY COALESCE(checked_at,
'-infinity'), id LIMIT batch``. Without an index that is a sequential scan and a sort of every live
row on every pass, even when nothing is due (51 ms at 90,000 authorizations, 130 ms when all are
due, with the sort spilling to disk: docs/connections.md). Keyed on that very expression, the pass
is an index scan that stops after its batch (0.03 ms with nothing due, 4 ms for a batch of 100).
Both are partial: active rows only, and on connections only API-key ones (an OAuth connection's
health is its authorizations'), so revoked rows and the OAuth summary rows never enter them.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

import sqlalchemy as sa

from service.db.migrate import create_index_concurrently, drop_index_concurrently

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_CHECKED = sa.text("COALESCE(checked_at, '-infinity'::timestamp with time zone)")


def upgrade() -> None:
    create_index_concurrently(
        "ix_authorizations_probe_due",
        "authorizations",
        [_CHECKED, "id"],
        postgresql_where=sa.text("status = 'active'"),
    )
    create_index_concurrently(
        "ix_connections_key_probe",
        "connections",
        [_CHECKED, "id"],
        postgresql_where=sa.text("status = 'active' AND token_type = 'api_key'"),
    )


def downgrade() -> None:
    drop_index_concurrently("ix_connections_key_probe", "connections")
    drop_index_concurrently("ix_authorizations_probe_due", "authorizations")
