"""Connection health: each authorization (and, as a summary, its connection) says whether it works.

``status`` stays what the token endpoint decides on (``active``, ``reauthorization_required``,
``revoked``); ``health`` is what an operator, a server and a person read: ``healthy``,
``expiring`` (still works, but a person must act soon: the refresh token nears its own end, or
there is none and the access token nears its end), ``needs_reauthorization`` or ``revoked``, with
the reason (a stable code such as ``invalid_grant``, ``refresh_token_expired``,
``revoked_by_user``), the provider's HTTP status when it gave one, when it was last checked, and
when the refresh token itself expires (``refresh_token_expires_in``, as GitHub sends it).

On an authorization ``health`` follows ``status`` (a check says so): ``needs_reauthorization``
exactly when ``reauthorization_required``, ``revoked`` exactly when ``revoked``; a trigger gives a
write that sets only the status (the previous release's, during a rollout) the health it implies. The existing rows
get the health their status implies; the new columns are nullable or carry a constant default
(stored in the catalog: no table rewrite), and the backfill is one ``UPDATE`` of the rows that are
not healthy.

The indexes the proactive refresh pass reads by are built concurrently by 0016.

``webhook_outbox.flow_id`` becomes nullable: a connection event has no flow. Downgrading drops
those deliveries (they have no flow to point at).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

HEALTH = "('healthy', 'expiring', 'needs_reauthorization', 'revoked')"
_FOLLOWS_STATUS = (
    "(status = 'reauthorization_required') = (health = 'needs_reauthorization') "
    "AND (status = 'revoked') = (health = 'revoked')"
)


def _columns(table: str) -> None:
    op.add_column(table, sa.Column("health", sa.String(32), nullable=False, server_default=sa.text("'healthy'")))
    op.add_column(table, sa.Column("health_reason", sa.String(64)))
    op.add_column(table, sa.Column("health_http_status", sa.Integer()))
    op.add_column(table, sa.Column("checked_at", sa.DateTime(timezone=True)))
    op.add_column(table, sa.Column("refresh_expires_at", sa.DateTime(timezone=True)))
    op.execute(
        f"UPDATE {table} SET health = CASE status WHEN 'revoked' THEN 'revoked' ELSE 'needs_reauthorization' END, "
        "health_reason = CASE status WHEN 'revoked' THEN 'revoked' ELSE 'provider_refused' END "
        "WHERE status IN ('revoked', 'reauthorization_required')"
    )
    op.create_check_constraint(op.f(f"ck_{table}_health"), table, f"health IN {HEALTH}")


# A writer that knows nothing of health (the previous release, during a rollout) still leaves the
# rows consistent: a change of status brings the health it implies. This release's statements set
# both together, so the trigger changes nothing for them (and fires only where status is written).
_TRIGGER_FUNCTION = """
CREATE FUNCTION authorizations_health_follows_status() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.status = 'revoked' THEN
        NEW.health := 'revoked';
    ELSIF NEW.status = 'reauthorization_required' THEN
        NEW.health := 'needs_reauthorization';
    ELSIF NEW.health IN ('revoked', 'needs_reauthorization') THEN
        NEW.health := 'healthy';
    END IF;
    RETURN NEW;
END
$body$
"""
_TRIGGER = (
    "CREATE TRIGGER health_follows_status BEFORE INSERT OR UPDATE OF status ON authorizations "
    "FOR EACH ROW EXECUTE FUNCTION authorizations_health_follows_status()"
)


def upgrade() -> None:
    _columns("authorizations")
    op.execute(_TRIGGER_FUNCTION)
    op.execute(_TRIGGER)
    op.create_check_constraint(op.f("ck_authorizations_health_follows_status"), "authorizations", _FOLLOWS_STATUS)
    _columns("connections")
    op.alter_column("webhook_outbox", "flow_id", nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM webhook_outbox WHERE flow_id IS NULL")
    op.alter_column("webhook_outbox", "flow_id", nullable=False)
    op.drop_constraint(op.f("ck_authorizations_health_follows_status"), "authorizations", type_="check")
    op.execute("DROP TRIGGER health_follows_status ON authorizations")
    op.execute("DROP FUNCTION authorizations_health_follows_status()")
    for table in ("authorizations", "connections"):
        op.drop_constraint(op.f(f"ck_{table}_health"), table, type_="check")
        for column in ("refresh_expires_at", "checked_at", "health_http_status", "health_reason", "health"):
            op.drop_column(table, column)
