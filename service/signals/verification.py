"""The verification challenge a new webhook endpoint must answer before it receives events.

The worker POSTs a signed ``webhook.verification`` event (the endpoint's own secret, the usual
headers) whose ``data`` holds a random ``challenge``; the endpoint is ``active`` once it answered
2xx with the JSON body ``{"challenge": <the value sent>}``. Anything else leaves it
``pending_verification``, asked again after the deliveries' backoff: an endpoint that never
answers never receives an event (nothing is queued for it). One challenge per endpoint is in
flight across replicas (a lease, as for deliveries), and the answer is recorded only for the
round and the URL it was sent to.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock
from service.db.unit import unit_of_work
from service.signals import endpoints
from service.signals.envelope import EVENT_ID, event_body
from service.signals.models import ENDPOINT_ID
from service.signals.pinned import DestinationRefused

logger = logging.getLogger("elicitd.webhooks")

EVENT_TYPE_HEADER = "Elicitd-Event-Type"


@dataclass(frozen=True, slots=True)
class Challenge:
    endpoint_id: uuid.UUID
    server_client_id: uuid.UUID
    url: str
    secret: str | None
    attempt: int


class Sender(Protocol):
    """What of the webhook worker a challenge uses: its sessions, clock, backoff, signing."""

    sessions: async_sessionmaker[AsyncSession]
    clock: Clock
    batch_size: int

    @property
    def lease_seconds(self) -> float: ...

    def backoff(self, attempt: int) -> float: ...

    def signed_headers(self, secret: str, previous: str | None, msg_id: str, body: bytes) -> dict[str, str]: ...

    def open_secret(self, server_client_id: uuid.UUID, key_id: str | None, blob: bytes | None) -> str | None: ...


async def claim(sender: Sender) -> list[Challenge]:
    """Endpoints due a challenge, leased to this replica."""
    async with unit_of_work(sender.sessions) as session:
        rows = (
            await session.execute(
                text(endpoints.CLAIM_CHALLENGES), {"lease": sender.lease_seconds, "batch": sender.batch_size}
            )
        ).all()
    return [
        Challenge(
            endpoint_id=r.id,
            server_client_id=r.server_client_id,
            url=r.url,
            secret=sender.open_secret(r.server_client_id, r.secret_key_id, r.secret_enc),
            attempt=r.challenge_attempts,
        )
        for r in rows
    ]


async def send(sender: Sender, http: httpx.AsyncClient, endpoint: Challenge) -> bool:
    """POST the challenge and record the answer (and the attempt); returns whether it was right."""
    value = secrets.token_urlsafe(24)
    event_id = uuid.uuid4()
    status: int | None = None
    error: str | None = "no webhook secret"
    duration_ms = 0.0
    if endpoint.secret is not None:
        body = event_body(
            event_id,
            endpoints.VERIFICATION_EVENT,
            sender.clock.now(),
            {
                "type": endpoints.VERIFICATION_EVENT,
                "endpoint_id": ENDPOINT_ID.format(endpoint.endpoint_id),
                "challenge": value,
            },
        )
        headers = sender.signed_headers(endpoint.secret, None, EVENT_ID.format(event_id), body)
        headers[EVENT_TYPE_HEADER] = endpoints.VERIFICATION_EVENT
        started = sender.clock.monotonic()
        try:
            response = await http.post(endpoint.url, content=body, headers=headers)
            status = response.status_code
            error = None if echoes(response, value) else (f"http {status}" if status >= 300 else "no echo")
        except DestinationRefused as exc:
            error = f"destination refused: {exc.reason}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__  # the text can hold the URL
        duration_ms = round((sender.clock.monotonic() - started) * 1000, 1)
    params: dict[str, Any] = {
        "url": endpoint.url,
        "delay": sender.backoff(endpoint.attempt),
        **endpoints.attempt_params(
            endpoint=endpoint.endpoint_id,
            delivery=None,
            event_type=endpoints.VERIFICATION_EVENT,
            attempt=endpoint.attempt,
            status=status,
            duration_ms=duration_ms,
            error=error,
        ),
    }
    async with unit_of_work(sender.sessions) as session:
        await session.execute(text(endpoints.VERIFIED if error is None else endpoints.CHALLENGE_FAILED), params)
    logger.info(
        "webhook endpoint verified" if error is None else "webhook endpoint challenge failed",
        extra={"endpoint": ENDPOINT_ID.format(endpoint.endpoint_id), "status": status, "code": error},
    )
    return error is None


def echoes(response: httpx.Response, value: str) -> bool:
    """A 2xx whose JSON body is an object with ``challenge`` equal to the value sent."""
    if not 200 <= response.status_code < 300:
        return False
    try:
        answer = response.json()
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("challenge") == value
