"""elicitd's event stream (``GET /v1/events``) as an async iterator that never loses its place.

    async for event in elicitd.events():
        if event.type.startswith("flow."):
            ...  # event.data["flow_id"], event.data["status"]

The stream is Server-Sent Events. Each event carries its position (``seq``, the SSE id); when the
connection drops the iterator reconnects with ``Last-Event-ID`` and elicitd resumes right after
the last event it yielded, from PostgreSQL — nothing is lost or repeated within elicitd's
retention window. ``event.body`` and ``event.headers`` are the exact webhook body and its Standard
Webhooks headers, so ``event.verify(secret)`` (or any Standard Webhooks library) checks it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from elicitd_client.errors import ElicitdError, error_from_problem
from elicitd_client.webhooks import verify_event

if TYPE_CHECKING:
    from elicitd_client.client import ElicitdClient

logger = logging.getLogger("elicitd_client.events")

# elicitd sends a heartbeat every 15 s: three missed ones mean the connection is gone.
READ_TIMEOUT_SECONDS = 45.0
MAX_RECONNECT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the stream."""

    seq: int  # its position in this server client's stream (what Last-Event-ID resumes after)
    type: str  # flow.completed | flow.declined | … | connection.revoked | grant.revoked
    id: str  # evt_…, the same as the webhook delivery's id for a flow event
    created_at: str
    data: dict[str, Any]  # e.g. {"flow_id", "elicitation_id", "status", "kind", "subject", …}
    body: str = field(repr=False)  # the exact signed body
    headers: dict[str, str] = field(repr=False)  # webhook-id, webhook-timestamp, webhook-signature

    def verify(self, secret: str, *, tolerance_seconds: float = 300) -> dict[str, Any]:
        """Check the signature with the server client's webhook secret; returns the event body."""
        return verify_event(secret, self.body, self.headers, tolerance_seconds=tolerance_seconds)

    @classmethod
    def parse(cls, seq: int, event_type: str, data: str) -> Event:
        envelope = json.loads(data)
        body = str(envelope["body"])
        document = json.loads(body)
        return cls(
            seq=seq,
            type=str(document.get("type", event_type)),
            id=str(document["id"]),
            created_at=str(document.get("created_at", "")),
            data=dict(document.get("data") or {}),
            body=body,
            headers={str(k): str(v) for k, v in dict(envelope.get("headers") or {}).items()},
        )


@dataclass
class _Message:
    event: str = "message"
    data: list[str] = field(default_factory=list)


class SseParser:
    """The Server-Sent Events line protocol (the WHATWG rules: ``field: value`` lines, blank line
    ends a message, ``:`` starts a comment, ``id`` sets the last event id even without data)."""

    def __init__(self) -> None:
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self._message = _Message()
        self._pending_id: str | None = None

    def feed_line(self, line: str) -> tuple[str | None, str, str] | None:
        """One line without its end; returns ``(id, event, data)`` when a message is complete."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._message.data.append(value)
        elif name == "event":
            self._message.event = value
        elif name == "id" and "\0" not in value:
            self._pending_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> tuple[str | None, str, str] | None:
        message, self._message = self._message, _Message()
        if self._pending_id is not None:
            self.last_event_id = self._pending_id
            self._pending_id = None
        if not message.data:
            return None
        return self.last_event_id, message.event, "\n".join(message.data)


class EventsExpired(ElicitdError):
    """The events after the requested position are gone (past elicitd's retention window)."""

    default_code = "events_expired"


class EventStream:
    """Iterate over a server client's events, reconnecting and resuming until closed."""

    def __init__(
        self,
        client: ElicitdClient,
        *,
        last_event_id: int | None = None,
        on_connected: Callable[[int], None] | None = None,
        restart_when_expired: bool = False,
    ) -> None:
        self.client = client
        self.last_event_id = last_event_id
        self.on_connected = on_connected
        self.restart_when_expired = restart_when_expired
        self.connections = 0
        self._retry_ms: int | None = None  # elicitd's ``retry:`` advice

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._run()

    async def _run(self) -> AsyncIterator[Event]:
        failures = 0
        retry_ms = 2000
        while True:
            try:
                async for event in self._connect():
                    failures = 0
                    yield event
                failures = 0  # elicitd ended the stream (it restarts): resume at once
            except EventsExpired:
                if not self.restart_when_expired:
                    raise
                logger.warning("events past the retention window were missed; resuming from now")
                self.last_event_id = None
                continue
            except (httpx.TransportError, ElicitdError) as exc:
                if isinstance(exc, ElicitdError) and exc.status in (400, 401, 403, 404):
                    raise
                failures += 1
                logger.info(
                    "event stream interrupted; resuming", extra={"error_type": type(exc).__name__, "attempt": failures}
                )
            retry_ms = self._retry_ms or retry_ms
            delay = min(retry_ms / 1000 * (2 ** min(failures, 5)), MAX_RECONNECT_SECONDS) if failures else 0.05
            await asyncio.sleep(delay * (0.5 + random.random() / 2))  # noqa: S311 (jitter, not security)

    async def _connect(self) -> AsyncIterator[Event]:
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = str(self.last_event_id)
        timeout = httpx.Timeout(self.client.timeout, read=READ_TIMEOUT_SECONDS)
        async with self.client.stream_get("/v1/events", headers=headers, timeout=timeout) as response:
            if response.status_code >= 400:
                await response.aread()
                problem = _problem(response)
                if response.status_code == 410:
                    raise EventsExpired(str(problem.get("detail", "events expired")), status=410, problem=problem)
                raise error_from_problem(response.status_code, problem)
            self.connections += 1
            parser = SseParser()
            announced = False
            async for line in response.aiter_lines():
                message = parser.feed_line(line)
                self._retry_ms = parser.retry_ms or self._retry_ms
                if parser.last_event_id is not None and parser.last_event_id.isdigit():
                    position = int(parser.last_event_id)
                    if not announced:
                        announced = True
                        self.last_event_id = position
                        if self.on_connected is not None:
                            self.on_connected(position)
                if message is None:
                    continue
                event_id, event_type, data = message
                if event_id is None or not event_id.isdigit():
                    continue
                try:
                    event = Event.parse(int(event_id), event_type, data)
                except (ValueError, KeyError, TypeError):
                    logger.warning("unreadable event skipped", extra={"seq": event_id})
                    self.last_event_id = int(event_id)
                    continue
                self.last_event_id = event.seq
                yield event


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"detail": f"elicitd answered HTTP {response.status_code}"}


__all__ = ["Event", "EventStream", "EventsExpired", "SseParser"]
