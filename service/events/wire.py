"""How events look on the stream (Server-Sent Events), signed like webhooks.

Each event is one SSE message: ``id`` is its number in the server client's stream (what
``Last-Event-ID`` resumes after), ``event`` its type, and ``data`` one line of JSON holding the
exact webhook body and the Standard Webhooks headers that sign it::

    id: 42
    event: flow.completed
    data: {"headers":{"webhook-id":"evt_…","webhook-timestamp":"1767225600","webhook-signature":"v1,…"},
           "body":"{\\"created_at\\":…,\\"data\\":{…},\\"id\\":\\"evt_…\\",\\"type\\":\\"flow.completed\\"}"}

so ``Webhook(secret).verify(data["body"], data["headers"])`` of any Standard Webhooks library
accepts it, with the secret the server client's webhooks use. A client without a webhook secret
gets no ``webhook-signature`` (the stream itself is authenticated by its API key over TLS).

The first message carries only ``retry`` and ``id`` (the stream's position when it opened): a
consumer that reconnects before any event arrived still resumes from there, not from "now".
Heartbeats are comment lines.

A server client that must prove the subject (``subject_proof = required``) reads its stream with
its API key alone, so its events say what happened to which flow, connection or grant and never
whose it was or what was connected: ``key_only`` keeps the fields of ``KEY_ONLY_FIELDS`` and drops
the rest (the subject, the account id). A field added to a payload later stays off such streams
until it is named here.
"""

from __future__ import annotations

import json
from typing import Any

from service.events.repository import Row
from service.signals.signing import ID_HEADER, TIMESTAMP_HEADER, standard_headers
from service.signals.webhooks import EVENT_ID, event_body

RETRY_MILLISECONDS = 2000
HEARTBEAT = b": keepalive\n\n"

KEY_ONLY_FIELDS = frozenset(
    {
        "type",
        "flow_id",
        "elicitation_id",
        "kind",
        "status",
        "provider",
        "error_code",
        "occurred_at",
        "connection_id",
        "grant_id",
        "scopes",
        "revoked_by",
        # Connection health events (``service.connections.health``): why and until when, no one's name.
        "reason",
        "http_status",
        "expires_at",
        "refresh_expires_at",
    }
)


def key_only(payload: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in payload.items() if name in KEY_ONLY_FIELDS}


def opening(position: int) -> bytes:
    return f": elicitd events\nretry: {RETRY_MILLISECONDS}\nid: {position}\n\n".encode()


def message(row: Row, secret: str | None, timestamp: int, *, whole: bool = True) -> bytes:
    """One event; ``whole`` False for a stream that may carry only ``key_only`` fields."""
    body = event_body(row.id, row.type, row.created_at, row.payload if whole else key_only(row.payload))
    event_id = EVENT_ID.format(row.id)
    if secret is not None:
        headers = standard_headers(secret, event_id, timestamp, body)
    else:
        headers = {ID_HEADER: event_id, TIMESTAMP_HEADER: str(timestamp)}
    data = json.dumps({"headers": headers, "body": body.decode()}, separators=(",", ":"))
    return f"id: {row.seq}\nevent: {row.type}\ndata: {data}\n\n".encode()
