"""Proactive refresh: every replica refreshes tokens before a server has to ask for them.

A pass (``Refresher.run_once``) does three bounded things, each at most ``batch_size`` rows:

1. **Marks what cannot work without a person** — a refresh token past its own end, an expired
   token with no refresh token — ``needs_reauthorization``, and what will soon be so
   ``expiring`` (``expiring_seconds`` ahead), each with its events (``service.connections.health``).
   No provider call: the database clock decides.
2. **Claims** the authorizations whose token expires within ``ahead_seconds`` (or that were not
   refreshed for ``max_age_seconds``, for providers that revoke idle grants), soonest first, with
   the very claim the token endpoint takes. ``SKIP LOCKED`` and the claim's own condition let every
   replica run passes at once: each authorization is claimed by exactly one of them (or by a
   request), never refreshed twice.
3. **Refreshes** them with no connection held during the provider calls, ``concurrency`` at a
   time and at most ``provider_rate`` a second per provider. The API shares the replica's event
   loop, so a wave yields to it: while the loop runs more than ``loop_lag_ms`` late, fewer calls
   are in flight (halved at each late tick, one added back at each prompt one, never fewer than
   one, so a wave always moves). A provider that fails transiently
   (5xx, a timeout, a rate limit) is left alone for the rest of the pass — its remaining claims
   are given up at once — and nothing is marked: only the provider's ``invalid_grant`` makes a
   connection ``needs_reauthorization``.

The pauses run on the injected clock; what is due is decided by the database clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

from service.clock import Clock, SystemClock
from service.connections import authorizations as authz
from service.connections.governor import Governor
from service.connections.models import Authorization
from service.connections.providers import ResolvedProvider, UnknownProvider
from service.connections.refresh import REFRESH_CLAIM_SECONDS
from service.connections.service import EXPIRING_SECONDS, ConnectionService
from service.db.base import CONNECTION_ID
from service.db.unit import unit_of_work
from service.errors import UpstreamError
from service.oauth_client import CALL_DEADLINE_SECONDS
from service.settings import Settings, positive_extras

logger = logging.getLogger("elicitd.connections.refresher")

# How long after its claim a pass may still start a provider call: the claim must outlive the
# call's whole deadline, or another claimant could take the row and refresh the same token meanwhile
# (a rotating provider reads a reused refresh token as theft and ends the grant). A pass claims no
# more than it can start in this window at its pace; what it could not start is left for the next.
CALL_WINDOW_SECONDS = REFRESH_CLAIM_SECONDS - CALL_DEADLINE_SECONDS - 1.0
# A pass's claims last longer than a request's: after the call, its write may wait for a pooled
# connection on a busy replica, and a claim lapsing then would let the next pass refresh the same
# token again (the bench's wave on a loaded machine did, a few times in 5,000). Nobody waits on a
# pass's claim: it refreshes minutes ahead, while the token endpoint refreshes only in the last 60 s.
PASS_CLAIM_SECONDS = REFRESH_CLAIM_SECONDS + 30.0


@dataclass(frozen=True, slots=True)
class RefreshSettings:
    """Read from ``ELICITD_REFRESH_*`` (through ``Settings.extra``); docs/configuration.md."""

    # Refresh a token this long before it expires (the token endpoint's own margin is 60 s).
    ahead_seconds: float = 300.0
    # Refresh at least this often even when the token does not expire (None: only by expiry).
    max_age_seconds: float | None = None
    # The pause between passes.
    pass_seconds: float = 15.0
    # At most this many rows per step of a pass.
    batch_size: int = 100
    # Provider calls in flight at once per replica (at most: ``loop_lag_ms`` lowers it).
    concurrency: int = 4
    # While the event loop runs more than this late, a pass has fewer calls in flight
    # (``ELICITD_REFRESH_LOOP_LAG_MS=off``: always ``concurrency``).
    loop_lag_ms: float | None = 10.0
    # Refresh calls per second to any one provider from one replica (None: as fast as
    # ``concurrency`` allows); a pass waits its turn rather than burst past a provider's limit.
    provider_rate: float | None = None
    # ``expiring`` this long before a connection stops working without a person.
    expiring_seconds: float = EXPIRING_SECONDS
    # ``ELICITD_REFRESH_PROACTIVE=false`` runs no passes (the token endpoint still refreshes).
    proactive: bool = True
    # How long after its claim a pass may start a call; never more than ``CALL_WINDOW_SECONDS``.
    call_window_seconds: float = CALL_WINDOW_SECONDS
    # ``ELICITD_REFRESH_EVENTS=true``: every refresh (proactive or the token endpoint's) tells the
    # connection's grantees ``connection.refreshed``, in the statement that stores it. Off by default:
    # a fleet refreshing hourly would otherwise send every server an event per connection per hour.
    events: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> RefreshSettings:
        kinds: dict[str, type[int] | type[float]] = {
            "ahead_seconds": float,
            "max_age_seconds": float,
            "pass_seconds": float,
            "batch_size": int,
            "concurrency": int,
            "expiring_seconds": float,
            "provider_rate": float,
        }
        raw = settings.extra.get("REFRESH_PROACTIVE")
        proactive = raw is None or raw.strip().lower() not in {"0", "false", "no", "off"}
        events = (settings.extra.get("REFRESH_EVENTS") or "").strip().lower() in {"1", "true", "yes", "on"}
        off = (settings.extra.get("REFRESH_LOOP_LAG_MS") or "").strip().lower() in {"0", "off"}
        if not off:
            kinds["loop_lag_ms"] = float
        values = positive_extras(settings, "REFRESH_", kinds)
        if off:
            values["loop_lag_ms"] = None
        return cls(**values, proactive=proactive, events=events)


@dataclass(slots=True)
class PassOutcome:
    """What one pass did, by outcome (the refresh counter's words)."""

    ended: int = 0
    expiring: int = 0
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class Refresher:
    def __init__(self, connections: ConnectionService, settings: RefreshSettings, clock: Clock | None = None) -> None:
        self.connections = connections
        self.settings = settings
        self.clock = clock or connections.clock or SystemClock()
        # Kept across passes: a pass that follows a full one at once continues its pace, and the
        # calls it may have in flight.
        self._pace = _Pace(self.clock, settings.provider_rate)
        lag = None if settings.loop_lag_ms is None else settings.loop_lag_ms / 1000
        self.governor = Governor(settings.concurrency, lag)

    async def run_once(self) -> PassOutcome:
        outcome = PassOutcome()
        service = self.connections
        batch = self.settings.batch_size
        async with unit_of_work(service.sessions) as session:
            ended = await authz.mark_ended(session, batch)
            expiring = await authz.mark_expiring(session, self.settings.expiring_seconds, batch)
        outcome.ended, outcome.expiring = len(ended.authorizations), len(expiring.authorizations)
        await service.announce(sorted({*ended.told, *expiring.told}))
        claim = uuid.uuid4()
        # Before the statement: its claims start at the database's now(), never before this.
        claimed_at = self.clock.monotonic()
        async with unit_of_work(service.sessions) as session:
            claimed = await authz.claim_due(
                session,
                claim=claim,
                hold_seconds=PASS_CLAIM_SECONDS,
                margin_seconds=self.settings.ahead_seconds,
                max_age_seconds=self.settings.max_age_seconds,
                batch=self.claim_size,
            )
        outcome.claimed = len(claimed)
        if claimed:
            await self._refresh_all(claimed, claim, outcome, claimed_at)
        return outcome

    @property
    def claim_size(self) -> int:
        """At most ``batch_size``, and no more than the pace lets the pass start in its window."""
        rate = self.settings.provider_rate
        if rate is None:
            return self.settings.batch_size
        return max(1, min(self.settings.batch_size, int(rate * self.window)))

    @property
    def window(self) -> float:
        return min(self.settings.call_window_seconds, CALL_WINDOW_SECONDS)

    async def _refresh_all(
        self, claimed: list[Authorization], claim: uuid.UUID, outcome: PassOutcome, claimed_at: float
    ) -> None:
        service = self.connections
        providers: dict[str, ResolvedProvider | None] = {}
        for name in sorted({auth.provider for auth in claimed}):
            try:
                providers[name] = await service.provider(name)
            except (UnknownProvider, UpstreamError):
                providers[name] = None  # disabled or undiscoverable: nothing to call this pass
        resting: set[str] = set()
        unsettled: list[uuid.UUID] = []
        # Claims this pass gives up without a call, released together at its end.
        unused: list[uuid.UUID] = []

        def lapsed() -> bool:
            return self.clock.monotonic() - claimed_at > self.window

        async def one(auth: Authorization) -> None:
            async with self.governor.slot():
                provider = providers.get(auth.provider)
                if provider is None or auth.provider in resting:
                    unused.append(auth.id)
                    outcome.count("skipped")
                    unsettled.append(auth.id)
                    return
                if not lapsed():
                    await self._pace.turn(auth.provider)
                if lapsed():
                    # Too little of the claim is left for a whole call: the next pass takes it first.
                    unused.append(auth.id)
                    outcome.count("lapsed")
                    return
                result = await service.refresh_claimed(auth, claim, provider)
                outcome.count(result)
                if result == "failed":
                    unsettled.append(auth.id)
                    # Backing off: a provider failing now is not asked again in this pass.
                    resting.add(auth.provider)
                    logger.warning(
                        "proactive refresh failed; provider rested until the next pass",
                        extra={"provider": auth.provider, "connection_id": CONNECTION_ID.format(auth.connection_id)},
                    )

        watch = asyncio.create_task(self.governor.watch())
        try:
            await asyncio.gather(*(one(auth) for auth in claimed))
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if unsettled or unused:
            async with unit_of_work(service.sessions) as session:
                await authz.release_refresh_claims(session, unused, claim)
                await authz.note_checked(session, unsettled)

    async def run(self) -> None:
        """Passes forever (a serving replica's background task); a failing pass is logged and the
        next one runs on time."""
        if not self.settings.proactive:
            return
        while True:
            full = False
            try:
                # A pass that claimed all it may claim leaves more due: the next one starts at once,
                # so a wave drains at the provider's pace rather than one batch per pause.
                done = await self.run_once()
                full = done.claimed >= self.claim_size and done.outcomes.get("refreshed", 0) > 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep refreshing after a database hiccup
                logger.warning("refresh pass failed", extra={"error_type": type(exc).__name__})
            if not full:
                await self.clock.sleep(self.settings.pass_seconds)


class _Pace:
    """At most ``rate`` calls a second per provider: a call starts only ``1 / rate`` after the
    previous call to that provider started, and waits on the clock until then.

    A slot is taken when the call starts, not when its wait begins: calls that waited for slots
    of their own would all start together after the process was descheduled past several of
    them (a niced worker on a busy machine is, for tens of milliseconds), and the provider
    would see that burst on top of the pace. Woken, a call looks again and waits on if another
    took the slot meanwhile."""

    def __init__(self, clock: Clock, rate: float | None) -> None:
        self.clock = clock
        self.interval = 0.0 if rate is None else 1.0 / rate
        self._next: dict[str, float] = {}

    async def turn(self, provider: str) -> None:
        if not self.interval:
            return
        while True:
            now = self.clock.monotonic()
            free_at = self._next.get(provider, now)
            if free_at <= now:
                self._next[provider] = now + self.interval
                return
            await self.clock.sleep(free_at - now)
