"""``GET /v1/events``: the server client's event stream (Server-Sent Events).

Authenticated like the rest of the MCP-server API. ``Last-Event-ID`` (header, or the
``last_event_id`` query parameter for clients that cannot set headers) resumes after that event;
without it the stream starts at its current end. See ``service.events.hub`` for the guarantees and
``service.events.wire`` for the format.

A stream outlives the request that authenticated it, so the key is checked again, through the key
cache (``ELICITD_API_KEY_CACHE_SECONDS``), before every batch and every heartbeat: a key revoked
or a client disabled ends its streams within a heartbeat of the cache letting go of it, and
nothing is sent after that check fails. The same check reads the client's policy again, so a
client switched to ``subject_proof = required`` gets key-only events from its next batch on.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from litestar import Controller, Request, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import Stream

from service.errors import PROBLEM_JSON, Problem, Unauthenticated
from service.events import wire
from service.events.deps import EventDeps
from service.events.hub import EventHub, InvalidCursor, StreamSlot
from service.identity.deps import provide_server_client
from service.identity.keys import ApiKeyAuthenticator, AuthenticatedClient
from service.identity.models import SUBJECT_PROOF_REQUIRED
from service.limits import header_value
from service.problems import problem_responses

logger = logging.getLogger("elicitd.events")


def _cursor(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise InvalidCursor("Last-Event-ID must be the id of an event of this stream (a number).")
    return int(value)


async def _still_valid(keys: ApiKeyAuthenticator, authorization: str | None) -> AuthenticatedClient | None:
    """The stream's client as its key stands now, or None when the key no longer opens it."""
    try:
        return await keys.authenticate(authorization)
    except Unauthenticated:
        return None
    except Exception as exc:  # the key cannot be checked (database away): end the stream, fail closed
        logger.warning("event stream key check failed", extra={"error_type": type(exc).__name__})
        return None


async def _messages(
    events: EventHub,
    keys: ApiKeyAuthenticator,
    authorization: str | None,
    client_id: uuid.UUID,
    start: int,
    slot: StreamSlot,
) -> AsyncIterator[bytes]:
    try:
        secret = await events.signing_secret(client_id)
        yield wire.opening(start)
        async with contextlib.aclosing(events.stream(client_id, start)) as batches:
            async for batch in batches:
                client = await _still_valid(keys, authorization)
                if client is None or client.id != client_id:
                    return
                if batch is None:
                    yield wire.HEARTBEAT
                    continue
                now = int(events.clock.time())
                whole = client.subject_proof != SUBJECT_PROOF_REQUIRED
                yield b"".join(wire.message(row, secret, now, whole=whole) for row in batch)
    finally:
        events.release(client_id, slot)


class EventController(Controller):
    """Handlers take ``services``, which ``client`` also depends on (see ``service.identity.deps``)."""

    path = "/v1/events"
    tags = ["events"]
    dependencies = {"client": provide_server_client}
    security = [{"apiKey": []}]

    @get(
        "/",
        operation_id="streamEvents",
        summary="The server client's events as Server-Sent Events, resumable with Last-Event-ID",
        description="`flow.completed`, `flow.declined`, `flow.cancelled`, `flow.expired`, `flow.failed`, "
        "`connection.revoked` and `grant.revoked`, each with the webhook body and its Standard Webhooks "
        "signature headers. Every consumer gets every event; heartbeats are comment lines. 410 "
        "`events_expired` when events after `Last-Event-ID` were already purged; 429 `too_many_streams` "
        "when the server client already holds its limit of streams on this replica. The stream ends when "
        "its API key is revoked or its client disabled. A client with `subject_proof = required` gets "
        "events without `subject` or `account_id`.",
        media_type="text/event-stream",
        responses={
            **problem_responses(400, 401, 429),
            410: ResponseSpec(
                data_container=Problem,
                description="Events after Last-Event-ID are past the retention window (`events_expired`)",
                media_type=PROBLEM_JSON,
            ),
        },
    )
    async def stream(
        self,
        services: EventDeps,
        client: AuthenticatedClient,
        request: Request,  # type: ignore[type-arg]
        last_event_id: Annotated[
            str | None,
            Parameter(
                query="last_event_id",
                max_length=32,
                default=None,
                description="Resume after this event (the Last-Event-ID header wins when both are sent)",
            ),
        ] = None,
    ) -> Stream:
        after = _cursor(request.headers.get("last-event-id") or last_event_id)
        start = await services.events.start(client.id, after)
        slot = services.events.claim(client.id)
        authorization = header_value(request.scope, b"authorization")
        return Stream(
            _messages(services.events, services.authenticator, authorization, client.id, start, slot),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
