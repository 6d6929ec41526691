"""Completion webhooks: deliver the ``webhook_outbox`` rows that terminal transitions write.

The outbox row is inserted by the same statement as the transition (``flows/repository.py``), so a
delivery exists exactly when the transition committed, and the worker — which only sees committed
rows — can never announce a change that rolled back.

Across replicas, at most one delivery per event is in flight: a worker *claims* due rows with one
statement (``FOR UPDATE SKIP LOCKED`` picks rows no one else is claiming, and the same UPDATE sets
a lease and bumps ``attempts``). Only the holder of that attempt number may record its result, so
a worker that outlived its lease cannot overwrite a newer attempt. A crashed replica's lease simply
runs out and another replica retries. Failures back off exponentially (capped) and the event is
abandoned only after ``webhook_give_up_seconds`` (24 hours by default) of failures; the admin API
can replay it.

Each POST is signed per Standard Webhooks (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``; see ``service.signals.signing``), with the event id stable across retries for
de-duplication. The earlier ``Elicitd-Signature`` / ``Elicitd-Event-Id`` headers are still sent for
one release.

Where a POST may go is decided when it is sent, not only when the URL was registered: the worker's
HTTP client (``service.signals.pinned``) resolves the host itself, refuses addresses that are not
globally reachable unless ``ELICITD_WEBHOOK_ALLOWED_NETWORKS`` allows them, and connects to the
address it checked. A refused destination is a failed attempt like any other (retried, then
abandoned), recorded with the reason.

Deliveries go to webhook *endpoints* (``service.signals.endpoints``): each row names its endpoint,
signed with that endpoint's secret — and, during a rotation's grace, also with the previous one
(``webhook-signature`` then holds both, space-separated, as Standard Webhooks allows). A row with
no endpoint was queued by a release before endpoints existed and goes to the server client's
legacy webhook columns, as it did then. Every attempt is logged, and an endpoint failing for too
long is suspended.

A disabled server client's deliveries are *held*: the claim skips them while their retry window is
open, so nothing is sent while the client is disabled and enabling it again resumes them. Once the
window has run out a held delivery is claimed only to be abandoned, without a POST. The held rows
are few: a disabled client cannot create flows, so they come only from flows it had pending. The
rows of an endpoint that is not ``active`` (suspended, disabled) are held the same way.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.crypto.vault import Vault
from service.db.base import CLIENT_ID
from service.db.unit import unit_of_work
from service.destinations import IPNetwork, default_networks, parse_networks
from service.settings import Settings, positive_extras
from service.signals import endpoints, verification
from service.signals.endpoints import StreamTail
from service.signals.envelope import EVENT_ID, event_body
from service.signals.models import ENDPOINT_ID
from service.signals.pinned import DestinationRefused, PinnedTransport, Resolver
from service.signals.signing import (
    LEGACY_SIGNATURE_HEADER,
    legacy_signature,
    standard_headers,
    standard_signature,
)
from service.signals.signing import (
    SIGNATURE_HEADER as STANDARD_SIGNATURE_HEADER,
)
from service.signals.verification import Challenge

# ``EVENT_ID`` and ``event_body`` live in ``service.signals.envelope`` (the challenge uses them too).
__all__ = [
    "EVENT_ID",
    "WEBHOOK_EVENT_TYPES",
    "WEBHOOK_SECRET_PURPOSE",
    "WebhookSettings",
    "WebhookWorker",
    "event_body",
]

logger = logging.getLogger("elicitd.webhooks")

SIGNATURE_HEADER = LEGACY_SIGNATURE_HEADER
EVENT_ID_HEADER = "Elicitd-Event-Id"
EVENT_TYPE_HEADER = "Elicitd-Event-Type"
WEBHOOK_SECRET_PURPOSE = "webhook_secret"
# What a webhook can be sent (``server_clients.webhook_events`` picks among them; the statements
# that queue them are ``flows.repository``'s transitions and ``connections.health``'s changes).
WEBHOOK_EVENT_TYPES = (
    "flow.completed",
    "flow.declined",
    "flow.cancelled",
    "flow.expired",
    "flow.failed",
    "connection.expiring",
    "connection.needs_reauthorization",
    "connection.recovered",
    "connection.refreshed",
    endpoints.SUSPENDED_EVENT,
)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The deprecated ``Elicitd-Signature`` value for one attempt."""
    return legacy_signature(secret, timestamp, body)


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Read from ``ELICITD_WEBHOOK_*`` (through ``Settings.extra``) when the app is built."""

    backoff_seconds: float = 10.0
    backoff_max_seconds: float = 3600.0
    give_up_seconds: float = 86400.0
    timeout_seconds: float = 10.0
    poll_interval_seconds: float = 1.0
    # An endpoint failing for this long is suspended (``service.signals.endpoints``).
    suspend_after_seconds: float = 5 * 86400.0
    # How long a rotated-out endpoint secret still signs, unless the rotation names its own grace.
    rotation_grace_seconds: float = 86400.0
    # Non-global networks deliveries may reach anyway (``service.destinations``).
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookSettings:
        names = (
            "backoff_seconds",
            "backoff_max_seconds",
            "give_up_seconds",
            "timeout_seconds",
            "poll_interval_seconds",
            "suspend_after_seconds",
            "rotation_grace_seconds",
        )
        raw = settings.extra.get("WEBHOOK_ALLOWED_NETWORKS")
        allowed = (
            default_networks(dev_mode=settings.dev_mode)
            if raw is None
            else parse_networks(raw, name="ELICITD_WEBHOOK_ALLOWED_NETWORKS")
        )
        return cls(**positive_extras(settings, "WEBHOOK_", dict.fromkeys(names, float)), allowed_networks=allowed)


@dataclass(frozen=True, slots=True)
class Claimed:
    id: uuid.UUID
    server_client_id: uuid.UUID
    event_type: str
    payload: dict[str, Any]
    attempt: int
    created_at: datetime
    url: str | None
    secret: str | None
    disabled: bool = False
    endpoint_id: uuid.UUID | None = None
    event_id: uuid.UUID | None = None
    # The rotated-out secret while its grace lasts: the delivery carries its signature too.
    previous_secret: str | None = None
    endpoint_state: str = "active"

    @property
    def public_id(self) -> str:
        """The event's id (``webhook-id``): the same at every endpoint the event went to."""
        return EVENT_ID.format(self.event_id or self.id)


Outcome = Callable[[str], None]
Announce = Callable[[Iterable[uuid.UUID]], Awaitable[None]]


class WebhookWorker:
    """One per replica; started by ``create_app``'s lifespan when ``settings.background_tasks``."""

    def __init__(
        self,
        *,
        settings: WebhookSettings,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        stream_tail: StreamTail | None = None,
        on_events: Announce | None = None,
        on_outcome: Outcome | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        # The pause between rounds and the signature's timestamp. When a retry is due is decided by
        # the database (``next_attempt_at``), which every replica's worker reads the same way.
        self.clock: Clock = clock or SystemClock()
        self.sessions = sessions
        self.vault = vault
        self.on_outcome = on_outcome
        # The suspension appends to the event stream (numbered by ``service.events``, handed in by
        # the composition root); ``on_events`` wakes the stream's tails after that commit.
        self._failed_sql = endpoints.failed_statement(stream_tail or _no_stream)
        self.on_events = on_events
        # ``transport`` replaces the pinned one entirely (and with it the address rule); ``resolver``
        # only answers the pinned transport's name lookups.
        self._transport = transport
        self._resolver = resolver
        self._wake = asyncio.Event()
        self.batch_size = 20

    def wake(self, *_: object) -> None:
        """Called after a transition commits (a ``FlowService`` listener): deliver now, not next tick."""
        self._wake.set()

    def client(self) -> httpx.AsyncClient:
        """The client deliveries go through: the address rule is in its transport. Redirects are
        never followed (a redirect would lead to a URL nobody checked)."""
        transport = self._transport or PinnedTransport(self.settings.allowed_networks, resolver=self._resolver)
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.settings.timeout_seconds),
            follow_redirects=False,
            transport=transport,
            headers={"User-Agent": "elicitd-webhooks/1"},
        )

    async def run(self) -> None:
        async with self.client() as http:
            while True:
                try:
                    # Drain full batches back to back, yielding to the loop between them.
                    while await self.run_once(http) >= self.batch_size:  # noqa: ASYNC110
                        await asyncio.sleep(0)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # keep delivering after a database hiccup
                    logger.warning("webhook round failed", extra={"error_type": type(exc).__name__})
                await self._pause()

    async def _pause(self) -> None:
        """Until a wake-up or the next poll tick, whichever comes first."""
        woken = asyncio.ensure_future(self._wake.wait())
        tick = asyncio.ensure_future(self.clock.sleep(self.settings.poll_interval_seconds))
        try:
            await asyncio.wait((woken, tick), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            tick.cancel()
        self._wake.clear()

    async def run_once(self, http: httpx.AsyncClient) -> int:
        claimed = await self.claim()
        challenges = await self.claim_challenges()
        if claimed or challenges:
            await asyncio.gather(
                *(self.deliver(http, c) for c in claimed), *(self.challenge(http, c) for c in challenges)
            )
        return len(claimed)

    async def claim(self) -> list[Claimed]:
        lease = self.lease_seconds
        async with unit_of_work(self.sessions) as session:
            rows = (
                await session.execute(
                    text(endpoints.CLAIM_DELIVERIES),
                    {"lease": lease, "batch": self.batch_size, "horizon": self.settings.give_up_seconds},
                )
            ).all()
        return [self._claimed(r) for r in rows]

    def open_secret(self, server_client_id: uuid.UUID, key_id: str | None, blob: bytes | None) -> str | None:
        if not key_id or not blob:
            return None
        try:
            return self.vault.decrypt_text(
                key_id, bytes(blob), owner=CLIENT_ID.format(server_client_id), purpose=WEBHOOK_SECRET_PURPOSE
            )
        except Exception as exc:  # a lost key must not stop other deliveries
            logger.error(
                "webhook secret unreadable",
                extra={"error_type": type(exc).__name__, "server_client": CLIENT_ID.format(server_client_id)},
            )
            return None

    def _claimed(self, row: Any) -> Claimed:
        url = key_id = blob = previous_key_id = previous_blob = None
        disabled = False
        state = "active"
        if row.target is not None:
            url, key_id, blob, disabled, previous_key_id, previous_blob, state = row.target
        secret = self.open_secret(row.server_client_id, key_id, blob) if url else None
        previous = self.open_secret(row.server_client_id, previous_key_id, previous_blob) if secret else None
        return Claimed(
            id=row.id,
            server_client_id=row.server_client_id,
            event_type=row.event_type,
            payload=row.payload,
            attempt=row.attempts,
            created_at=row.created_at,
            url=url,
            secret=secret,
            disabled=bool(disabled),
            endpoint_id=row.endpoint_id,
            event_id=row.event_id,
            previous_secret=previous,
            endpoint_state=str(state),
        )

    @property
    def lease_seconds(self) -> float:
        """How long a claimed delivery or challenge is this replica's: its POST's timeout and 30 s."""
        return self.settings.timeout_seconds + 30

    def backoff(self, attempt: int) -> float:
        base: float = self.settings.backoff_seconds * float(2 ** min(attempt - 1, 30))
        jitter: float = random.uniform(0.9, 1.1)  # noqa: S311 - spreading retries, not a secret
        return min(base, self.settings.backoff_max_seconds) * jitter

    async def deliver(self, http: httpx.AsyncClient, event: Claimed) -> None:
        extra = {
            "delivery_id": EVENT_ID.format(event.id),
            "attempt": event.attempt,
            "server_client": CLIENT_ID.format(event.server_client_id),
        }
        if event.disabled:
            # Claimed only once its retry window ran out while the client stayed disabled.
            await self._record_failure(event, None, "server client disabled", 0.0, give_up=True)
            return
        if event.endpoint_state != "active":
            # Held while its endpoint was suspended or disabled, until the retry window ran out.
            await self._record_failure(event, None, f"endpoint {event.endpoint_state}", 0.0, give_up=True)
            return
        if event.url is None or event.secret is None:
            # The client removed its webhook since the transition: nothing to deliver to.
            await self._record_failure(event, None, "no webhook configured", 0.0, give_up=True)
            return
        body = event_body(event.event_id or event.id, event.event_type, event.created_at, event.payload)
        headers = self.signed_headers(event.secret, event.previous_secret, event.public_id, body)
        headers[EVENT_TYPE_HEADER] = event.event_type
        status, error, duration_ms = await self._post(http, event.url, body, headers)
        if error is None:
            async with unit_of_work(self.sessions) as session:
                await session.execute(
                    text(endpoints.DELIVERED),
                    {"id": event.id, **self._attempt(event, status, None, duration_ms)},
                )
            logger.info("webhook delivered", extra={**extra, "status": status, "duration_ms": duration_ms})
            self._outcome("delivered")
            return
        logger.info(
            "webhook attempt failed", extra={**extra, "status": status, "duration_ms": duration_ms, "code": error}
        )
        await self._record_failure(event, status, error, duration_ms, give_up=False)

    def signed_headers(self, secret: str, previous: str | None, msg_id: str, body: bytes) -> dict[str, str]:
        """Signed now; with the rotated-out secret's signature as well while its grace lasts."""
        now = int(self.clock.time())
        headers = {
            "Content-Type": "application/json",
            **standard_headers(secret, msg_id, now, body),
            SIGNATURE_HEADER: sign(secret, now, body),
            EVENT_ID_HEADER: msg_id,
        }
        if previous is not None:
            headers[STANDARD_SIGNATURE_HEADER] += " " + standard_signature(previous, msg_id, now, body)
        return headers

    async def _post(
        self, http: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int | None, str | None, float]:
        """One POST: its status, its error class (None when it was a 2xx) and how long it took.
        The error never holds the answer's body or the exception's text (which can hold the URL)."""
        started = self.clock.monotonic()
        status: int | None = None
        error: str | None
        try:
            response = await http.post(url, content=body, headers=headers)
            status = response.status_code
            error = None if 200 <= status < 300 else f"http {status}"
        except DestinationRefused as exc:
            error = f"destination refused: {exc.reason}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        return status, error, round((self.clock.monotonic() - started) * 1000, 1)

    @staticmethod
    def _attempt(event: Claimed, status: int | None, error: str | None, duration_ms: float) -> dict[str, object]:
        return endpoints.attempt_params(
            endpoint=event.endpoint_id,
            delivery=event.id,
            event_type=event.event_type,
            attempt=event.attempt,
            status=status,
            duration_ms=duration_ms,
            error=error,
        )

    async def _record_failure(
        self, event: Claimed, status: int | None, error: str, duration_ms: float, *, give_up: bool
    ) -> None:
        async with unit_of_work(self.sessions) as session:
            row = (
                await session.execute(
                    text(self._failed_sql),
                    {
                        "id": event.id,
                        "attempt": event.attempt,
                        "status": status,
                        "error": error,
                        "delay": self.backoff(event.attempt),
                        "give_up": give_up,
                        "horizon": self.settings.give_up_seconds,
                        "suspend": self.settings.suspend_after_seconds,
                        **self._attempt(event, status, error, duration_ms),
                    },
                )
            ).one()
        if row.abandoned:
            logger.warning(
                "webhook abandoned", extra={"delivery_id": EVENT_ID.format(event.id), "attempt": event.attempt}
            )
        if row.suspended_client is not None:
            logger.warning(
                "webhook endpoint suspended",
                extra={
                    "endpoint": ENDPOINT_ID.format(event.endpoint_id) if event.endpoint_id else None,
                    "server_client": CLIENT_ID.format(event.server_client_id),
                },
            )
            if self.on_events is not None:
                await self.on_events([row.suspended_client])
            if row.queued:
                self.wake()
        self._outcome("abandoned" if row.abandoned else "failed")

    # ---- verification challenges (``service.signals.verification``) ---------------------------
    async def claim_challenges(self) -> list[Challenge]:
        return await verification.claim(self)

    async def challenge(self, http: httpx.AsyncClient, endpoint: Challenge) -> bool:
        return await verification.send(self, http, endpoint)

    def _outcome(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def _no_stream(_source: str) -> str:
    """For a worker built without the event stream: a suspension is then told to the endpoints only."""
    return ""
