"""operator_signin: the issuer marked for operator sign-in, and the console's operator sessions.

``operator_signin`` marks one ``issuers`` row (at most one: ``slot`` is unique and always true) as
where operators sign in, with the claim that carries their role and the values granting each role
(``{"viewer": [...], "operator": [...], "admin": [...]}``). Deleting the issuer deletes the mark.

``operator_sessions`` are the console's own sessions, apart from end users' ``browser_sessions``:
the id is the SHA-256 of the cookie value, the role is the one the ID token's claim granted at
sign-in, and ``authenticated_at`` is the token's ``auth_time`` (NULL when the issuer did not say),
which an admin-role change needs recent. A session ends at ``expires_at`` or after its idle time
since ``last_seen_at``, whichever is first; deleting or disabling the issuer ends its sessions.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE operator_signin (
            issuer_id uuid PRIMARY KEY
                CONSTRAINT fk_operator_signin_issuer_id_issuers REFERENCES issuers (id) ON DELETE CASCADE,
            slot boolean NOT NULL DEFAULT true CONSTRAINT ck_operator_signin_slot CHECK (slot),
            role_claim text NOT NULL CONSTRAINT ck_operator_signin_role_claim CHECK (role_claim <> ''),
            roles jsonb NOT NULL CONSTRAINT ck_operator_signin_roles CHECK (jsonb_typeof(roles) = 'object'),
            audience text,
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT uq_operator_signin_slot UNIQUE (slot)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE operator_sessions (
            id bytea PRIMARY KEY,
            issuer_id uuid NOT NULL
                CONSTRAINT fk_operator_sessions_issuer_id_issuers REFERENCES issuers (id) ON DELETE CASCADE,
            iss text NOT NULL,
            sub text NOT NULL,
            display_name text NOT NULL,
            role smallint NOT NULL CONSTRAINT ck_operator_sessions_role CHECK (role BETWEEN 1 AND 3),
            csrf_secret bytea NOT NULL,
            authenticated_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            last_seen_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX ix_operator_sessions_expires_at ON operator_sessions (expires_at)")
    op.execute("CREATE INDEX ix_operator_sessions_issuer_id ON operator_sessions (issuer_id)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS operator_sessions")
    op.execute("DROP TABLE IF EXISTS operator_signin")
