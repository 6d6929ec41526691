"""Which webhook endpoints an event is queued for: SQL fragments the statements that queue events
share (a flow's transition in ``service.flows.repository``, a connection's health change in
``service.connections.health``, an endpoint's suspension in ``service.signals.endpoints``).

An event is queued once per *active* endpoint of its server client whose filter takes its type,
in the statement that makes the change: a type an endpoint filters out, and every type for an
endpoint that is still ``pending_verification``, ``suspended`` or ``disabled``, is never queued
for it. Each row carries the event's id (``webhook-id``, the same at every endpoint); the legacy
endpoint's row (the one ``server_clients.webhook_url`` mirrors) takes the event's id as its own,
as every row did before endpoints existed, so a delivery id in the admin API is still the event id.
"""

from __future__ import annotations


def outbox_row_id(source: str) -> str:
    """The outbox row's id for the event in ``source`` (a CTE alias) at endpoint ``e``."""
    return f"CASE WHEN e.legacy THEN {source}.event_id ELSE gen_random_uuid() END"


def outbox_endpoints(source: str) -> str:
    """The join condition of ``webhook_endpoints e`` to the events of ``source``."""
    return (
        f"e.server_client_id = {source}.server_client_id AND e.state = 'active'"
        f" AND (e.events IS NULL OR {source}.type = ANY(e.events))"
    )
