"""What the webhook worker does to endpoints: answer attempts, suspend, verify.

* **Attempts.** Every POST to an endpoint — an event or a verification challenge — leaves one
  ``webhook_attempts`` row: when, the HTTP status, how long it took and the error's class (a status,
  a refused destination, a transport error's type). Never a body, a secret or a signature.
* **Suspension.** A failed attempt starts (or continues) the endpoint's ``failing_since``; a success
  clears it. The failure whose statement finds the endpoint failing for longer than
  ``ELICITD_WEBHOOK_SUSPEND_AFTER_SECONDS`` moves it to ``suspended`` and, in the same statement,
  appends ``webhook.endpoint_suspended`` to the client's event stream and queues it for the
  client's other active endpoints that take the type. Nothing more is sent to it (its queued rows
  are held as a disabled client's are) until an operator re-enables it, which asks it to answer a
  new challenge first.
* **Verification.** A new endpoint, or one whose URL changed, is ``pending_verification``: no event
  is queued for it. The worker POSTs it a signed ``webhook.verification`` event whose ``data`` holds
  a random ``challenge``; the endpoint proves it reads its secret's deliveries by answering 2xx with
  the JSON body ``{"challenge": "<the same value>"}``. Until it does it stays pending, asked again
  with the deliveries' backoff, and receives nothing.

The statements that append stream events need ``service.events``' numbering, which sits a layer
above this package: the composition root hands its ``stream_tail`` in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from service.db.base import CLIENT_ID
from service.signals.models import ENDPOINT_ID
from service.signals.routing import outbox_endpoints, outbox_row_id

StreamTail = Callable[[str], str]

SUSPENDED_EVENT = "webhook.endpoint_suspended"
VERIFICATION_EVENT = "webhook.verification"

_ATTEMPT = """
INSERT INTO webhook_attempts (endpoint_id, delivery_id, event_type, attempt, status, duration_ms, error)
SELECT CAST(:endpoint AS uuid), CAST(:delivery AS uuid), :event_type, :attempt, :status, :duration, :error
WHERE CAST(:endpoint AS uuid) IS NOT NULL
"""

# A success: the outbox row delivered (only by the holder of its attempt), the endpoint no longer
# failing, the attempt logged.
DELIVERED = f"""
WITH d AS (
    UPDATE webhook_outbox SET delivered_at = now(), last_status = :status, last_error = NULL, lease_until = NULL
     WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
    RETURNING id
), h AS (
    UPDATE webhook_endpoints SET failing_since = NULL
     WHERE id = CAST(:endpoint AS uuid) AND failing_since IS NOT NULL
), a AS ({_ATTEMPT})
SELECT count(*) FROM d
"""


def failed_statement(stream_tail: StreamTail) -> str:
    """A failure: the outbox row retried later or abandoned, the endpoint failing (suspended once
    it has failed for ``:suspend`` seconds), the attempt logged and, when this statement is the
    one that suspends it, ``webhook.endpoint_suspended`` on the stream and to the other endpoints.

    The endpoint row is locked first (``b``) so two failing deliveries of one endpoint cannot both
    read it ``active`` and both announce the suspension."""
    return (
        f"""
WITH o AS (
    UPDATE webhook_outbox
       SET last_status = :status, last_error = :error, lease_until = NULL,
           next_attempt_at = now() + make_interval(secs => :delay),
           abandoned_at = CASE WHEN :give_up OR now() >= retry_from + make_interval(secs => :horizon)
                               THEN now() END
     WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
    RETURNING abandoned_at IS NOT NULL AS abandoned
), b AS (
    SELECT id, state AS before FROM webhook_endpoints WHERE id = CAST(:endpoint AS uuid) FOR UPDATE
), s AS (
    UPDATE webhook_endpoints e
       SET failing_since = COALESCE(e.failing_since, now()),
           state = CASE WHEN e.state = 'active' AND e.failing_since <= now() - make_interval(secs => :suspend)
                        THEN 'suspended' ELSE e.state END,
           suspended_at = CASE WHEN e.state = 'active' AND e.failing_since <= now() - make_interval(secs => :suspend)
                               THEN now() ELSE e.suspended_at END,
           updated_at = now()
      FROM b WHERE e.id = b.id AND NOT :give_up
    RETURNING e.id, e.server_client_id, e.url, e.failing_since, b.before, e.state
), ev AS (
    SELECT s.server_client_id, gen_random_uuid() AS event_id, '{SUSPENDED_EVENT}'::text AS type,
           jsonb_build_object(
               'type', '{SUSPENDED_EVENT}',
               'endpoint_id', {ENDPOINT_ID.sql("s.id")},
               'server_client', {CLIENT_ID.sql("s.server_client_id")},
               'url', s.url,
               'failing_since', s.failing_since,
               'last_status', CAST(:status AS integer),
               'last_error', CAST(:error AS text),
               'occurred_at', now()) AS payload
    FROM s WHERE s.before = 'active' AND s.state = 'suspended'
), ob AS (
    INSERT INTO webhook_outbox (id, server_client_id, flow_id, event_type, payload, endpoint_id, event_id)
    SELECT {outbox_row_id("ev")}, ev.server_client_id, NULL, ev.type, ev.payload, e.id, ev.event_id
    FROM ev JOIN webhook_endpoints e ON {outbox_endpoints("ev")} AND e.id <> CAST(:endpoint AS uuid)
    RETURNING id
), a AS ({_ATTEMPT})"""
        + stream_tail("ev")
        + """
SELECT (SELECT bool_or(abandoned) FROM o) AS abandoned,
       (SELECT server_client_id FROM ev LIMIT 1) AS suspended_client,
       (SELECT count(*) FROM ob) AS queued
"""
    )


# Due deliveries, leased (``FOR UPDATE SKIP LOCKED``: one attempt in flight per row across
# replicas), with where each goes: its endpoint's URL, secret, rotated-out secret while its grace
# lasts and state — or, for a row queued before endpoints existed, the client's old columns. A
# disabled client's rows, and those of an endpoint that is not active, are held while their retry
# window is open.
CLAIM_DELIVERIES = """
UPDATE webhook_outbox o
   SET lease_until = now() + make_interval(secs => :lease), attempts = o.attempts + 1, last_attempt_at = now()
  FROM (SELECT w.id FROM webhook_outbox w
         WHERE w.delivered_at IS NULL AND w.abandoned_at IS NULL AND w.next_attempt_at <= now()
           AND (w.lease_until IS NULL OR w.lease_until <= now())
           AND NOT EXISTS (SELECT 1 FROM server_clients d
                            WHERE d.id = w.server_client_id AND d.disabled
                              AND now() < w.retry_from + make_interval(secs => :horizon))
           AND NOT EXISTS (SELECT 1 FROM webhook_endpoints he
                            WHERE he.id = w.endpoint_id AND he.state <> 'active'
                              AND now() < w.retry_from + make_interval(secs => :horizon))
         ORDER BY w.next_attempt_at LIMIT :batch FOR UPDATE OF w SKIP LOCKED) due
 WHERE o.id = due.id
RETURNING o.id, o.server_client_id, o.flow_id, o.event_type, o.payload, o.attempts, o.created_at,
          o.endpoint_id, o.event_id,
          CASE WHEN o.endpoint_id IS NULL THEN
              (SELECT row(sc.webhook_url, sc.webhook_secret_key_id, sc.webhook_secret_enc, sc.disabled,
                          NULL::text, NULL::bytea, 'active'::text)
                 FROM server_clients sc WHERE sc.id = o.server_client_id)
          ELSE
              (SELECT row(e.url, e.secret_key_id, e.secret_enc, sc.disabled,
                          CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_key_id END,
                          CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_enc END,
                          e.state::text)
                 FROM webhook_endpoints e JOIN server_clients sc ON sc.id = e.server_client_id
                WHERE e.id = o.endpoint_id)
          END AS target
"""

# Endpoints due a challenge, leased (one challenge in flight per endpoint across replicas). A
# disabled client's endpoints wait, as its deliveries do.
CLAIM_CHALLENGES = """
UPDATE webhook_endpoints e
   SET challenge_lease_until = now() + make_interval(secs => :lease), challenge_attempts = e.challenge_attempts + 1
  FROM (SELECT w.id FROM webhook_endpoints w
         WHERE w.state = 'pending_verification' AND w.challenge_next_at <= now()
           AND (w.challenge_lease_until IS NULL OR w.challenge_lease_until <= now())
           AND NOT EXISTS (SELECT 1 FROM server_clients d WHERE d.id = w.server_client_id AND d.disabled)
         ORDER BY w.challenge_next_at LIMIT :batch FOR UPDATE OF w SKIP LOCKED) due
 WHERE e.id = due.id
RETURNING e.id, e.server_client_id, e.url, e.secret_key_id, e.secret_enc, e.challenge_attempts
"""

# The answer was right: active, unless the endpoint changed meanwhile (another URL, another
# challenge round, an operator's change of state).
VERIFIED = f"""
WITH v AS (
    UPDATE webhook_endpoints
       SET state = 'active', verified_at = now(), challenge_lease_until = NULL, failing_since = NULL,
           suspended_at = NULL, updated_at = now()
     WHERE id = CAST(:endpoint AS uuid) AND state = 'pending_verification' AND url = :url
       AND challenge_attempts = :attempt
    RETURNING id
), a AS ({_ATTEMPT})
SELECT count(*) FROM v
"""

CHALLENGE_FAILED = f"""
WITH c AS (
    UPDATE webhook_endpoints
       SET challenge_next_at = now() + make_interval(secs => :delay), challenge_lease_until = NULL
     WHERE id = CAST(:endpoint AS uuid) AND state = 'pending_verification' AND challenge_attempts = :attempt
    RETURNING id
), a AS ({_ATTEMPT})
SELECT count(*) FROM c
"""


def attempt_params(
    *,
    endpoint: uuid.UUID | None,
    delivery: uuid.UUID | None,
    event_type: str,
    attempt: int,
    status: int | None,
    duration_ms: float,
    error: str | None,
) -> dict[str, object]:
    """The bind values of the attempt row every statement above logs."""
    return {
        "endpoint": None if endpoint is None else str(endpoint),
        "delivery": None if delivery is None else str(delivery),
        "event_type": event_type,
        "attempt": attempt,
        "status": status,
        "duration": duration_ms,
        "error": error,
    }
