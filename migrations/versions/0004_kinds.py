"""Consent receipts, API-key fields, payments and processed payment events.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    # One payment per payment flow: the flow id is the key, so a second checkout attempt for the
    # same flow finds the first one instead of charging twice.
    op.create_table(
        "payments",
        sa.Column(
            "flow_id",
            sa.Uuid(),
            sa.ForeignKey("flows.id", ondelete="CASCADE", name="fk_payments_flow_id_flows"),
            primary_key=True,
        ),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(255)),
        sa.Column("checkout_url", sa.Text()),
        sa.Column("session_expires_at", sa.DateTime(timezone=True)),
        sa.Column("payment_id", sa.String(255)),
        sa.Column("status", sa.String(16), nullable=False, server_default=sa.text("'created'")),
        sa.Column("settled_by", sa.String(16)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.CheckConstraint(
            "status IN ('created', 'open', 'processing', 'paid', 'expired', 'failed', 'paid_late')",
            name=op.f("ck_payments_status"),
        ),
        sa.UniqueConstraint("provider", "session_id", name="uq_payments_provider_session_id"),
    )
    op.create_index(
        "ix_payments_open",
        "payments",
        ["created_at"],
        postgresql_where=sa.text("status IN ('created', 'open', 'processing')"),
    )
    # Every provider event id is processed once: the insert of this row and the flow transition
    # it causes commit together, so a redelivery finds the row and changes nothing.
    op.create_table(
        "payment_events",
        sa.Column("event_id", sa.String(255), primary_key=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("flow_id", sa.Uuid()),
        sa.Column("session_id", sa.String(255)),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    )
    op.create_index("ix_payment_events_flow_id", "payment_events", ["flow_id"])
    # Consent receipts issued: the JWS is in the flow result; this row lets an operator find a
    # receipt by its id (jti) and prove what text digest was approved, even after flows are purged.
    op.create_table(
        "consent_receipts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("flow_id", sa.Uuid(), nullable=False),
        sa.Column("server_client_id", sa.Uuid(), nullable=False),
        sa.Column("subject_iss", sa.Text(), nullable=False),
        sa.Column("subject_sub", sa.Text(), nullable=False),
        sa.Column("text_sha256", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("receipt", sa.Text(), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("flow_id", name="uq_consent_receipts_flow_id"),
    )
    # API-key providers live beside OAuth ones (connections reference providers by name): the
    # auth type says which, and the API-key definition (fields, validation, live check) is data.
    op.add_column(
        "providers", sa.Column("auth_type", sa.String(16), nullable=False, server_default=sa.text("'oauth2'"))
    )
    op.add_column("providers", sa.Column("api_key_config", postgresql.JSONB()))
    op.execute("ALTER TABLE providers ADD CONSTRAINT ck_providers_auth_type CHECK (auth_type IN ('oauth2', 'api_key'))")
    # Non-secret values entered beside an API key (a region, an account id).
    op.add_column(
        "connections", sa.Column("fields", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb"))
    )


def downgrade() -> None:
    op.drop_column("connections", "fields")
    op.execute("ALTER TABLE providers DROP CONSTRAINT ck_providers_auth_type")
    op.drop_column("providers", "api_key_config")
    op.drop_column("providers", "auth_type")
    op.drop_table("consent_receipts")
    op.drop_index("ix_payment_events_flow_id", table_name="payment_events")
    op.drop_table("payment_events")
    op.drop_index("ix_payments_open", table_name="payments")
    op.drop_table("payments")
