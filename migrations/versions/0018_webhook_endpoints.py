"""webhook_endpoints: several webhook endpoints per server client, and their delivery attempts.

Each endpoint has its URL, its own event filter, its own vault-sealed secret (and, during a
rotation's grace, the previous one) and a state: ``pending_verification`` (a challenge must be
answered first), ``active``, ``suspended`` (failing for too long) or ``disabled``. Outbox rows now
name the endpoint they go to (``endpoint_id``) and the event they carry (``event_id``: one event
sent to two endpoints is two rows with the same ``webhook-id``).

The single webhook of ``server_clients`` becomes the client's first endpoint, marked ``legacy``
and ``active`` (it was receiving events already). The old columns keep working for one release:
a trigger mirrors every write of them (the previous release's ``PUT …/webhook`` during a rollout,
and this release's, which still offers that route) into the legacy endpoint, so an event the
previous release queues (``endpoint_id`` NULL, addressed by the old columns) and one this release
queues reach the same URL with the same secret.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-11
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_STATES = "'pending_verification', 'active', 'suspended', 'disabled'"

_MIRROR = """
CREATE FUNCTION webhook_legacy_endpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.webhook_url IS NULL THEN
        DELETE FROM webhook_endpoints WHERE server_client_id = NEW.id AND legacy;
    ELSE
        INSERT INTO webhook_endpoints AS e
               (id, server_client_id, url, events, state, secret_key_id, secret_enc, legacy, verified_at)
        VALUES (gen_random_uuid(), NEW.id, NEW.webhook_url, NEW.webhook_events, 'active',
                NEW.webhook_secret_key_id, NEW.webhook_secret_enc, true, now())
        ON CONFLICT (server_client_id) WHERE legacy DO UPDATE
           SET url = EXCLUDED.url, events = EXCLUDED.events,
               secret_key_id = EXCLUDED.secret_key_id, secret_enc = EXCLUDED.secret_enc,
               state = CASE WHEN e.url IS DISTINCT FROM EXCLUDED.url THEN 'active' ELSE e.state END,
               updated_at = now();
    END IF;
    RETURN NEW;
END $$
"""
_TRIGGER = """
CREATE TRIGGER webhook_legacy_endpoint
    AFTER INSERT OR UPDATE OF webhook_url, webhook_events, webhook_secret_enc, webhook_secret_key_id
    ON server_clients FOR EACH ROW EXECUTE FUNCTION webhook_legacy_endpoint();
"""


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "server_client_id",
            sa.Uuid(),
            sa.ForeignKey(
                "server_clients.id", ondelete="CASCADE", name="fk_webhook_endpoints_server_client_id_server_clients"
            ),
            nullable=False,
        ),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", postgresql.ARRAY(sa.Text())),
        sa.Column("state", sa.String(24), nullable=False, server_default=sa.text("'pending_verification'")),
        # NULL only on a legacy endpoint whose old columns name a URL without a secret (its
        # deliveries are abandoned as "no webhook configured", as they were before).
        sa.Column("secret_key_id", sa.String(32)),
        sa.Column("secret_enc", sa.LargeBinary()),
        sa.Column("previous_secret_key_id", sa.String(32)),
        sa.Column("previous_secret_enc", sa.LargeBinary()),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True)),
        sa.Column("legacy", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("verified_at", sa.DateTime(timezone=True)),
        sa.Column("challenge_attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("challenge_next_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("challenge_lease_until", sa.DateTime(timezone=True)),
        sa.Column("failing_since", sa.DateTime(timezone=True)),
        sa.Column("suspended_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint(f"state IN ({_STATES})", name=op.f("ck_webhook_endpoints_state")),
    )
    op.create_index("ix_webhook_endpoints_server_client_id", "webhook_endpoints", ["server_client_id"])
    op.create_index(
        "ix_webhook_endpoints_legacy",
        "webhook_endpoints",
        ["server_client_id"],
        unique=True,
        postgresql_where=sa.text("legacy"),
    )
    op.create_index(
        "ix_webhook_endpoints_challenge_due",
        "webhook_endpoints",
        ["challenge_next_at"],
        postgresql_where=sa.text("state = 'pending_verification'"),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column(
            "endpoint_id",
            sa.Uuid(),
            sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE", name="fk_webhook_attempts_endpoint_id"),
            nullable=False,
        ),
        # The outbox row attempted; NULL for a verification challenge (and once the row is deleted).
        sa.Column("delivery_id", sa.Uuid()),
        sa.Column("event_type", sa.String(48), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("status", sa.Integer()),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("error", sa.Text()),
    )
    op.create_index("ix_webhook_attempts_endpoint", "webhook_attempts", ["endpoint_id", "id"])
    op.add_column(
        "webhook_outbox",
        sa.Column(
            "endpoint_id",
            sa.Uuid(),
            sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE", name="fk_webhook_outbox_endpoint_id"),
        ),
    )
    op.add_column("webhook_outbox", sa.Column("event_id", sa.Uuid()))
    # The table is new and empty here: a plain index costs nothing. Serves the cascade and listings.
    op.create_index("ix_webhook_outbox_endpoint_id", "webhook_outbox", ["endpoint_id"])
    op.execute(
        "INSERT INTO webhook_endpoints (id, server_client_id, url, events, state, secret_key_id, secret_enc, "
        "legacy, verified_at) "
        "SELECT gen_random_uuid(), id, webhook_url, webhook_events, 'active', webhook_secret_key_id, "
        "webhook_secret_enc, true, now() FROM server_clients "
        "WHERE webhook_url IS NOT NULL"
    )
    op.execute(_MIRROR)
    op.execute(_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS webhook_legacy_endpoint ON server_clients")
    op.execute("DROP FUNCTION IF EXISTS webhook_legacy_endpoint()")
    op.drop_index("ix_webhook_outbox_endpoint_id", "webhook_outbox")
    # Rows queued for endpoints other than the legacy one have no address in the old schema.
    op.execute(
        "DELETE FROM webhook_outbox o USING webhook_endpoints e WHERE e.id = o.endpoint_id AND NOT e.legacy "
        "AND o.delivered_at IS NULL AND o.abandoned_at IS NULL"
    )
    op.drop_column("webhook_outbox", "event_id")
    op.drop_column("webhook_outbox", "endpoint_id")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_endpoints")
