"""``GET /v1/events``: the server client's event stream (Server-Sent Events).

Authenticated like the rest of the MCP-server API. ``Last-Event-ID`` (header, or the
``last_event_id`` query parameter for clients that cannot set headers) resumes after that event;
without it the stream starts at its current end. See ``service.events.hub`` for the guarantees and
``service.events.wire`` for the format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated

from litestar import Controller, Request, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import Stream

from service.errors import PROBLEM_JSON, Problem, problem_responses
from service.events import wire
from service.events.hub import EventHub, InvalidCursor
from service.identity.deps import provide_server_client
from service.identity.keys import AuthenticatedClient

if TYPE_CHECKING:
    from service.services import Services


def _cursor(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise InvalidCursor("Last-Event-ID must be the id of an event of this stream (a number).")
    return int(value)


async def _messages(events: EventHub, client: AuthenticatedClient, start: int) -> AsyncIterator[bytes]:
    secret = await events.signing_secret(client.id)
    yield wire.opening(start)
    async for batch in events.stream(client.id, start):
        if batch is None:
            yield wire.HEARTBEAT
            continue
        now = int(events.clock.time())
        yield b"".join(wire.message(row, secret, now) for row in batch)


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
        "`events_expired` when events after `Last-Event-ID` were already purged.",
        media_type="text/event-stream",
        responses={
            **problem_responses(400, 401),
            410: ResponseSpec(
                data_container=Problem,
                description="Events after Last-Event-ID are past the retention window (`events_expired`)",
                media_type=PROBLEM_JSON,
            ),
        },
    )
    async def stream(
        self,
        services: Services,
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
        return Stream(
            _messages(services.events, client, start),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
