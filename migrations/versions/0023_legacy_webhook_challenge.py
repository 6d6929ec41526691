"""legacy_webhook_challenge: the deprecated single webhook answers the verification challenge too.

Since 0018 a write of the old webhook columns (``PUT …/webhook``, this release's or the previous
one's) made the client's legacy endpoint ``active`` at once, so a URL set that way received events
without proving it reads them. Now the trigger treats a URL the legacy endpoint did not have — a
first webhook, or a changed one — as every new endpoint is treated: ``pending_verification``, its
challenge due now, nothing queued for it until it has answered. An endpoint whose URL stays (a
change of its filter or secret) keeps its state, so a legacy endpoint that is ``active`` today
stays active; a ``disabled`` one stays disabled whatever its URL.

Only the trigger's function changes (``CREATE OR REPLACE``): no table is touched or locked beyond
the function's own catalog row.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_CHALLENGED = """
CREATE OR REPLACE FUNCTION webhook_legacy_endpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.webhook_url IS NULL THEN
        DELETE FROM webhook_endpoints WHERE server_client_id = NEW.id AND legacy;
    ELSE
        INSERT INTO webhook_endpoints AS e
               (id, server_client_id, url, events, state, secret_key_id, secret_enc, legacy, verified_at,
                challenge_next_at, challenge_attempts)
        VALUES (gen_random_uuid(), NEW.id, NEW.webhook_url, NEW.webhook_events, 'pending_verification',
                NEW.webhook_secret_key_id, NEW.webhook_secret_enc, true, NULL, now(), 0)
        ON CONFLICT (server_client_id) WHERE legacy DO UPDATE
           SET url = EXCLUDED.url, events = EXCLUDED.events,
               secret_key_id = EXCLUDED.secret_key_id, secret_enc = EXCLUDED.secret_enc,
               state = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url OR e.state = 'disabled' THEN e.state
                            ELSE 'pending_verification' END,
               verified_at = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url THEN e.verified_at END,
               challenge_next_at = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url THEN e.challenge_next_at
                                        ELSE now() END,
               challenge_attempts = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url THEN e.challenge_attempts
                                         ELSE 0 END,
               challenge_lease_until = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url
                                            THEN e.challenge_lease_until END,
               failing_since = CASE WHEN e.url IS NOT DISTINCT FROM EXCLUDED.url THEN e.failing_since END,
               updated_at = now();
    END IF;
    RETURN NEW;
END $$
"""

# 0018's function, as it was.
_ACTIVE_AT_ONCE = """
CREATE OR REPLACE FUNCTION webhook_legacy_endpoint() RETURNS trigger LANGUAGE plpgsql AS $$
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


def upgrade() -> None:
    op.execute(_CHALLENGED)


def downgrade() -> None:
    op.execute(_ACTIVE_AT_ONCE)
