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

A disabled server client's deliveries are *held*: the claim skips them while their retry window is
open, so nothing is sent while the client is disabled and enabling it again resumes them. Once the
window has run out a held delivery is claimed only to be abandoned, without a POST. The held rows
are few: a disabled client cannot create flows, so they come only from flows it had pending.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.crypto.vault import Vault
from service.db.base import CLIENT_ID, PrefixedId
from service.db.unit import unit_of_work
from service.destinations import IPNetwork, default_networks, parse_networks
from service.settings import Settings, positive_extras
from service.signals.pinned import DestinationRefused, PinnedTransport, Resolver
from service.signals.signing import LEGACY_SIGNATURE_HEADER, legacy_signature, standard_headers

logger = logging.getLogger("elicitd.webhooks")

EVENT_ID = PrefixedId("evt")
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
)

_CLAIM = """
UPDATE webhook_outbox o
   SET lease_until = now() + make_interval(secs => :lease), attempts = o.attempts + 1, last_attempt_at = now()
  FROM (SELECT w.id FROM webhook_outbox w
         WHERE w.delivered_at IS NULL AND w.abandoned_at IS NULL AND w.next_attempt_at <= now()
           AND (w.lease_until IS NULL OR w.lease_until <= now())
           AND NOT EXISTS (SELECT 1 FROM server_clients d
                            WHERE d.id = w.server_client_id AND d.disabled
                              AND now() < w.retry_from + make_interval(secs => :horizon))
         ORDER BY w.next_attempt_at LIMIT :batch FOR UPDATE OF w SKIP LOCKED) due
 WHERE o.id = due.id
RETURNING o.id, o.server_client_id, o.flow_id, o.event_type, o.payload, o.attempts, o.created_at,
          (SELECT row(sc.webhook_url, sc.webhook_secret_key_id, sc.webhook_secret_enc, sc.disabled)
             FROM server_clients sc WHERE sc.id = o.server_client_id) AS target
"""

_DELIVERED = """
UPDATE webhook_outbox SET delivered_at = now(), last_status = :status, last_error = NULL, lease_until = NULL
 WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
"""

_FAILED = """
UPDATE webhook_outbox
   SET last_status = :status, last_error = :error, lease_until = NULL,
       next_attempt_at = now() + make_interval(secs => :delay),
       abandoned_at = CASE WHEN :give_up OR now() >= retry_from + make_interval(secs => :horizon)
                           THEN now() END
 WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
RETURNING abandoned_at IS NOT NULL
"""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The deprecated ``Elicitd-Signature`` value for one attempt."""
    return legacy_signature(secret, timestamp, body)


def event_body(event_id: uuid.UUID, event_type: str, created_at: datetime, payload: dict[str, Any]) -> bytes:
    """The exact bytes POSTed (identical on every retry; the signature covers them as sent)."""
    document = {
        "id": EVENT_ID.format(event_id),
        "type": event_type,
        "created_at": created_at.isoformat(),
        "data": payload,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Read from ``ELICITD_WEBHOOK_*`` (through ``Settings.extra``) when the app is built."""

    backoff_seconds: float = 10.0
    backoff_max_seconds: float = 3600.0
    give_up_seconds: float = 86400.0
    timeout_seconds: float = 10.0
    poll_interval_seconds: float = 1.0
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


Outcome = Callable[[str], None]


class WebhookWorker:
    """One per replica; started by ``create_app``'s lifespan when ``settings.background_tasks``."""

    def __init__(
        self,
        *,
        settings: WebhookSettings,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
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
        if claimed:
            await asyncio.gather(*(self.deliver(http, c) for c in claimed))
        return len(claimed)

    async def claim(self) -> list[Claimed]:
        lease = self.settings.timeout_seconds + 30
        async with unit_of_work(self.sessions) as session:
            rows = (
                await session.execute(
                    text(_CLAIM),
                    {"lease": lease, "batch": self.batch_size, "horizon": self.settings.give_up_seconds},
                )
            ).all()
        return [self._claimed(r) for r in rows]

    def _claimed(self, row: Any) -> Claimed:
        url = key_id = blob = None
        disabled = False
        if row.target is not None:
            url, key_id, blob, disabled = row.target
        secret = None
        if url and key_id and blob:
            try:
                secret = self.vault.decrypt_text(
                    key_id, bytes(blob), owner=CLIENT_ID.format(row.server_client_id), purpose=WEBHOOK_SECRET_PURPOSE
                )
            except Exception as exc:  # a lost key must not stop other deliveries
                logger.error(
                    "webhook secret unreadable",
                    extra={"error_type": type(exc).__name__, "server_client": CLIENT_ID.format(row.server_client_id)},
                )
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
        )

    def backoff(self, attempt: int) -> float:
        base: float = self.settings.backoff_seconds * float(2 ** min(attempt - 1, 30))
        jitter: float = random.uniform(0.9, 1.1)  # noqa: S311 - spreading retries, not a secret
        return min(base, self.settings.backoff_max_seconds) * jitter

    async def deliver(self, http: httpx.AsyncClient, event: Claimed) -> None:
        started = self.clock.monotonic()
        extra = {
            "delivery_id": EVENT_ID.format(event.id),
            "attempt": event.attempt,
            "server_client": CLIENT_ID.format(event.server_client_id),
        }
        if event.disabled:
            # Claimed only once its retry window ran out while the client stayed disabled.
            await self._record_failure(event, None, "server client disabled", give_up=True)
            return
        if event.url is None or event.secret is None:
            # The client removed its webhook since the transition: nothing to deliver to.
            await self._record_failure(event, None, "no webhook configured", give_up=True)
            return
        body = event_body(event.id, event.event_type, event.created_at, event.payload)
        now = int(self.clock.time())
        headers = {
            "Content-Type": "application/json",
            **standard_headers(event.secret, EVENT_ID.format(event.id), now, body),
            SIGNATURE_HEADER: sign(event.secret, now, body),
            EVENT_ID_HEADER: EVENT_ID.format(event.id),
            EVENT_TYPE_HEADER: event.event_type,
        }
        status: int | None = None
        try:
            response = await http.post(event.url, content=body, headers=headers)
            status = response.status_code
            error = None if 200 <= status < 300 else f"http {status}"
        except DestinationRefused as exc:
            error = f"destination refused: {exc.reason}"
        except httpx.HTTPError as exc:
            # The exception text can hold the URL or response bits; only its type is kept.
            error = type(exc).__name__
        duration_ms = round((self.clock.monotonic() - started) * 1000, 1)
        if error is None:
            async with unit_of_work(self.sessions) as session:
                await session.execute(text(_DELIVERED), {"id": event.id, "attempt": event.attempt, "status": status})
            logger.info("webhook delivered", extra={**extra, "status": status, "duration_ms": duration_ms})
            self._outcome("delivered")
            return
        logger.info(
            "webhook attempt failed", extra={**extra, "status": status, "duration_ms": duration_ms, "code": error}
        )
        await self._record_failure(event, status, error, give_up=False)

    async def _record_failure(self, event: Claimed, status: int | None, error: str, *, give_up: bool) -> None:
        async with unit_of_work(self.sessions) as session:
            abandoned = (
                await session.execute(
                    text(_FAILED),
                    {
                        "id": event.id,
                        "attempt": event.attempt,
                        "status": status,
                        "error": error,
                        "delay": self.backoff(event.attempt),
                        "give_up": give_up,
                        "horizon": self.settings.give_up_seconds,
                    },
                )
            ).scalar()
        if abandoned:
            logger.warning(
                "webhook abandoned", extra={"delivery_id": EVENT_ID.format(event.id), "attempt": event.attempt}
            )
        self._outcome("abandoned" if abandoned else "failed")

    def _outcome(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
