"""Health probes: a scheduled, authenticated call that asks the provider whether a connection still works.

A refresh only happens when a token nears its end; a grant the user revoked at the provider, or a
token that now answers for another account, would otherwise stay ``healthy`` until a tool call
fails. A probe pass (``Prober.run_once``) takes the live authorizations not checked for
``interval_seconds`` (a refresh counts as a check: the provider just accepted the grant) whose
provider names a probe — its account endpoint (the catalog's, or the operator's override) — and
calls it with the access token:

* **200 naming the same account** (the provider's ``account_id_field``): checked, health unchanged.
* **200 naming another account**: ``needs_reauthorization`` with ``account_changed``; the tokens
  are wiped, since they no longer act for the account the person connected.
* **401**: the access token alone may have been dropped, so the refresh token decides, under the
  very claim the probe holds (``ConnectionService.refresh_claimed``): ``invalid_grant`` makes it
  ``needs_reauthorization``; new tokens keep it healthy; a transient failure marks nothing. Without
  a refresh token nothing can cure it: ``needs_reauthorization`` with ``probe_unauthorized``.
* **403** without a rate-limit sign (``Retry-After``, ``X-RateLimit-Remaining: 0``, as GitHub
  answers a rate limit): ``needs_reauthorization`` with ``probe_forbidden``.
* **Anything else** — 5xx, 429, a timeout, a reset, an answer that names no account — is
  *unknown*: nothing is marked, the claim is given up, and that provider is not probed again by
  this replica for ``retry_seconds``; the rows stay due, so they are retried after the rest. A
  provider storm never marks a connection ``needs_reauthorization``.

The same pass checks stored API keys where their kind says how (``service.connections.key_probes``):
the two halves share the claim, the batch, the concurrency gate, the counter and the rests.

Single flight across replicas: the pass claims rows with the refresh claim itself (one
``UPDATE … FOR UPDATE SKIP LOCKED``), so two replicas never probe the same authorization and no
refresh runs on a row while it is probed (the claim lasts longer than the call's deadline and is
ended by every outcome). Rows whose token is due for a refresh are left to the refresher. No
connection is held during a provider call: claim, commit, call, then one conditional write.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.clock import Clock, SystemClock
from service.connections import authorizations as authz
from service.connections.catalog import dig
from service.connections.key_probes import KeyProbePass, KeyProbes, KeyRequest
from service.connections.models import ACTIVE, EXPIRING, HEALTHY, Authorization, Connection, Provider
from service.connections.probe_verdicts import (
    ACCOUNT_CHANGED,
    NEEDS_REAUTHORIZATION,
    OK,
    PROBE_FORBIDDEN,
    PROBE_UNAUTHORIZED,
    REFRESH,
    REFRESHED,
    SKIPPED,
    UNKNOWN,
    Verdict,
    rate_limited,
)
from service.connections.providers import ResolvedProvider, UnknownProvider
from service.connections.refresh import REFRESH_CLAIM_SECONDS
from service.connections.service import ConnectionService
from service.db.base import CONNECTION_ID
from service.db.unit import unit_of_work
from service.errors import ReauthorizationRequired, UpstreamError
from service.http import read_json
from service.oauth_client import CALL_DEADLINE_SECONDS
from service.settings import Settings, positive_extras

logger = logging.getLogger("elicitd.connections.probes")


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """Read from ``ELICITD_PROBE_*`` (through ``Settings.extra``); docs/operating.md."""

    # Probe an authorization not checked (probed or refreshed) for this long.
    interval_seconds: float = 6 * 3600.0
    # The pause between passes.
    pass_seconds: float = 60.0
    # At most this many authorizations per pass.
    batch_size: int = 100
    # Probe calls in flight at once per replica.
    concurrency: int = 4
    # A provider that answered a probe with 5xx, 429 or not at all is not probed again (by this
    # replica) for this long; its rows stay due and are retried after it.
    retry_seconds: float = 300.0
    # ``ELICITD_PROBE_ENABLED=false`` runs no probes.
    enabled: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> ProbeSettings:
        kinds: dict[str, type[int] | type[float]] = {
            "interval_seconds": float,
            "pass_seconds": float,
            "batch_size": int,
            "concurrency": int,
            "retry_seconds": float,
        }
        raw = settings.extra.get("PROBE_ENABLED")
        enabled = raw is None or raw.strip().lower() not in {"0", "false", "no", "off"}
        return cls(**positive_extras(settings, "PROBE_", kinds), enabled=enabled)


@dataclass(slots=True)
class ProbeOutcome:
    """What one pass did: how many it claimed, and each probe's outcome."""

    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


# Rows whose token is due for a refresh within the margin are the refresher's; the claim is the
# refresh claim, so neither a refresh nor another replica's probe runs on a row while it is probed.
# ``COALESCE(checked_at, '-infinity')`` (never checked: first) is the key of
# ``ix_authorizations_probe_due`` (0019), so a pass is an index scan that stops after its batch.
_CLAIM_DUE = (
    "UPDATE authorizations a SET refresh_claim = :claim, refresh_claimed_until = now() + make_interval(secs => :hold) "
    "FROM (SELECT id FROM authorizations "
    f"WHERE status = '{ACTIVE}' AND health IN ('{HEALTHY}', '{EXPIRING}') AND provider = ANY(:providers) "
    "AND access_token_enc IS NOT NULL AND access_token_key_id IS NOT NULL "
    "AND (refresh_claimed_until IS NULL OR refresh_claimed_until <= now()) "
    "AND (expires_at IS NULL OR expires_at > now() + make_interval(secs => :margin)) "
    "AND COALESCE(checked_at, '-infinity') <= now() - make_interval(secs => :interval) "
    "ORDER BY COALESCE(checked_at, '-infinity'), id LIMIT :batch FOR UPDATE SKIP LOCKED) d "
    "WHERE a.id = d.id RETURNING a.*"
)

# The probe's good answer: checked now, the claim ended — only while the claim is still this
# pass's and the authorization still active (a reconnect or a revocation meanwhile wins).
_CHECKED = (
    "UPDATE authorizations SET checked_at = now(), refresh_claim = NULL, refresh_claimed_until = NULL "
    f"WHERE id = :id AND refresh_claim = :claim AND status = '{ACTIVE}'"
)


async def claim_due(
    session: AsyncSession,
    *,
    claim: uuid.UUID,
    providers: list[str],
    interval_seconds: float,
    margin_seconds: float,
    batch: int,
) -> list[Authorization]:
    if not providers:
        return []
    stmt = select(Authorization).from_statement(text(_CLAIM_DUE)).execution_options(populate_existing=True)
    params: dict[str, Any] = {
        "claim": claim,
        "hold": REFRESH_CLAIM_SECONDS,
        "providers": providers,
        "margin": margin_seconds,
        "interval": interval_seconds,
        "batch": batch,
    }
    return list((await session.execute(stmt, params)).scalars())


def _answered_account(response: httpx.Response, provider: ResolvedProvider) -> str | None:
    try:
        document = read_json(response)
    except ValueError:
        return None
    answered = dig(document, provider.account_id_field) if isinstance(document, dict) else None
    if answered is None or isinstance(answered, dict | list) or str(answered) == "":
        return None
    return str(answered)[:255]  # as ``oauth.fetch_account`` stored it


def classify(response: httpx.Response, provider: ResolvedProvider, account_id: str) -> Verdict:
    """The answer of the account endpoint, read without trusting it: a status and one field."""
    status = response.status_code
    if status == 200:
        answered = _answered_account(response, provider)
        if answered is None:
            return Verdict(UNKNOWN)  # an answer naming no account proves nothing either way
        return Verdict(OK) if answered == account_id else Verdict(NEEDS_REAUTHORIZATION, ACCOUNT_CHANGED, None)
    if status == 401:
        return Verdict(REFRESH, PROBE_UNAUTHORIZED, 401)
    if status == 403 and not rate_limited(response):
        return Verdict(NEEDS_REAUTHORIZATION, PROBE_FORBIDDEN, 403)
    return Verdict(UNKNOWN)


class Prober:
    def __init__(
        self,
        connections: ConnectionService,
        settings: ProbeSettings,
        clock: Clock | None = None,
        on_probe: Callable[[str, str], None] | None = None,
        kinds: Sequence[KeyProbes] = (),
    ) -> None:
        self.connections = connections
        self.settings = settings
        self.clock = clock or connections.clock or SystemClock()
        # ``(provider, outcome)`` after each probe (the metrics' probe counter).
        self.on_probe = on_probe
        # Providers that failed a probe transiently, with the monotonic time their rest ends.
        self._resting: dict[str, float] = {}
        # API-key connections, checked as their kinds say (``service.connections.key_probes``).
        self.keys = KeyProbePass(connections, kinds, rest=self._rest)

    def _is_resting(self, provider: str) -> bool:
        return self._resting.get(provider, 0.0) > self.clock.monotonic()

    async def _probeable(self) -> dict[str, ResolvedProvider]:
        """The enabled OAuth providers that name a probe and are not resting."""
        service = self.connections
        async with service.read_sessions() as session:
            query = select(Provider.name).where(Provider.enabled, Provider.auth_type == "oauth2")
            names = list((await session.execute(query)).scalars())
        found: dict[str, ResolvedProvider] = {}
        for name in sorted(names):
            if self._is_resting(name):
                continue
            try:
                provider = await service.provider(name)
            except (UnknownProvider, UpstreamError):
                continue  # disabled meanwhile or undiscoverable: nothing to call this pass
            if provider.account_endpoint:
                found[name] = provider
        return found

    async def run_once(self) -> ProbeOutcome:
        outcome = ProbeOutcome()
        providers = await self._probeable()
        keyed = {name: check for name, check in (await self.keys.probeable()).items() if not self._is_resting(name)}
        if not providers and not keyed:
            return outcome
        claim = uuid.uuid4()
        async with unit_of_work(self.connections.sessions) as session:
            claimed = await claim_due(
                session,
                claim=claim,
                providers=sorted(providers),
                interval_seconds=self.settings.interval_seconds,
                margin_seconds=self.connections.margin,
                batch=self.settings.batch_size,
            )
        keys = await self.keys.claim(
            claim, sorted(keyed), interval_seconds=self.settings.interval_seconds, batch=self.settings.batch_size
        )
        outcome.claimed = len(claimed) + len(keys)
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def one(auth: Authorization) -> None:
            async with gate:
                if self._is_resting(auth.provider):
                    await self.connections.release(auth.id, claim)
                    result = SKIPPED
                else:
                    result = await self._probe(auth, claim, providers[auth.provider])
                self._count(outcome, auth.provider, result)

        async def one_key(conn: Connection, check: KeyRequest) -> None:
            async with gate:
                if self._is_resting(conn.provider):
                    await self.keys.release(conn.id, claim)
                    result = SKIPPED
                else:
                    result = await self.keys.probe(conn, claim, check)
                self._count(outcome, conn.provider, result)

        await asyncio.gather(*(one(auth) for auth in claimed), *(one_key(conn, keyed[conn.provider]) for conn in keys))
        return outcome

    def _count(self, outcome: ProbeOutcome, provider: str, result: str) -> None:
        outcome.count(result)
        if self.on_probe is not None:
            self.on_probe(provider, result)

    async def _probe(self, auth: Authorization, claim: uuid.UUID, provider: ResolvedProvider) -> str:
        service = self.connections
        ref = CONNECTION_ID.format(auth.connection_id)
        settled = False
        try:
            try:
                token = service.open_access_token(auth)
            except ReauthorizationRequired:
                token = None  # unreadable: the token endpoint says so when asked; a probe cannot tell more
            if token is None:
                return UNKNOWN
            verdict = await self._call(provider, token, auth.account_id)
            if verdict.outcome == UNKNOWN:
                self._rest(provider.name)
                return UNKNOWN
            if verdict.outcome == OK:
                async with unit_of_work(service.sessions) as session:
                    await session.execute(text(_CHECKED), {"id": auth.id, "claim": claim})
                settled = True
                return OK
            if verdict.outcome == REFRESH and auth.refresh_token_enc is not None:
                # The refresh settles the claim whatever it answers.
                settled = True
                answer = await service.refresh_claimed(auth, claim, provider)
                if answer == "failed":
                    self._rest(provider.name)
                return {"refreshed": REFRESHED, "needs_reauthorization": NEEDS_REAUTHORIZATION}.get(answer, UNKNOWN)
            async with unit_of_work(service.sessions) as session:
                moved = await authz.mark_reauthorization_required(
                    session,
                    auth.id,
                    reason=verdict.reason or PROBE_UNAUTHORIZED,
                    http_status=verdict.http_status,
                    claim=claim,
                )
            settled = True
            await service.announce(moved.told)
            logger.info(
                "probe found the connection needs reauthorization",
                extra={"connection_id": ref, "provider": auth.provider, "code": verdict.reason},
            )
            return NEEDS_REAUTHORIZATION
        finally:
            if not settled:
                await service.release(auth.id, claim)

    async def _call(self, provider: ResolvedProvider, token: str, account_id: str) -> Verdict:
        assert provider.account_endpoint is not None
        try:
            async with asyncio.timeout(CALL_DEADLINE_SECONDS):
                # The very request the connect step named the account with (``oauth.fetch_account``).
                response = await self.connections.http.request(
                    provider.quirks.account_method,
                    provider.account_endpoint,
                    headers={
                        "Accept": "application/json",
                        **provider.quirks.account_headers,
                        "Authorization": f"Bearer {token}",
                    },
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            logger.warning("probe call failed", extra={"provider": provider.name, "error_type": type(exc).__name__})
            return Verdict(UNKNOWN)
        return classify(response, provider, account_id)

    def _rest(self, provider: str) -> None:
        """Back off: a provider failing now is not probed again by this replica for a while."""
        self._resting[provider] = self.clock.monotonic() + self.settings.retry_seconds
        logger.warning("probe inconclusive; provider rested", extra={"provider": provider})

    async def run(self) -> None:
        """Passes forever (a serving replica's background task); a failing pass is logged and the
        next one runs on time. The first pass waits one pass period: a replica that is starting
        (or a fleet restarting at once) does not call every provider in its first second, and one
        stopped at once never probes through a closing HTTP client."""
        if not self.settings.enabled:
            return
        while True:
            await self.clock.sleep(self.settings.pass_seconds)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep probing after a database hiccup
                logger.warning("probe pass failed", extra={"error_type": type(exc).__name__})
