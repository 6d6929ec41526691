"""Health probes of API-key connections: the kind says how a key is checked, this module does the rest.

An API-key connection keeps its key on its own row (no authorization, no refresh). A key revoked at
the service would stay ``healthy`` until a tool call fails with it, so the probe pass
(``service.connections.probes.Prober``) also takes the live API-key connections not checked for
``interval_seconds`` (storing the key counts as a check: the live check just accepted it) whose
provider's definition names a check, and sends that check with the stored key:

* **2xx**: checked, health unchanged (the body is never parsed).
* **401 / 403** (a 403 without a rate-limit sign): ``needs_reauthorization`` with
  ``probe_unauthorized`` / ``probe_forbidden`` and the status; the key is wiped (the service no
  longer takes it, and a dead secret is not kept), and the token endpoint answers
  ``409 reauthorization_required`` until the person enters a key again (an ``api_key`` flow, which
  makes the same connection ``healthy`` with ``connection.recovered``).
* **Anything else** — 5xx, 429, a timeout, a reset — marks nothing; the provider rests, as for
  OAuth probes.

The connections layer cannot know a kind's definitions, so the kind gives the pass a ``KeyProbes``
(its plugin's ``probes`` factory, built from the ``KindContext``): which of its providers are
checkable and, for one key, the request — the key travels only in that request's headers, which no
``repr`` shows. Claimed like every probe, with the connection row's own refresh claim (one
``UPDATE … FOR UPDATE SKIP LOCKED``), so one replica checks each key; no database connection is held
during the call; each outcome is one conditional statement, the health change with its events.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections import health
from service.connections.models import (
    ACTIVE,
    EXPIRING,
    HEALTHY,
    NEEDS_REAUTHORIZATION,
    REAUTHORIZATION_REQUIRED,
    Connection,
)
from service.connections.probe_verdicts import OK, UNKNOWN, Verdict, key_verdict
from service.connections.refresh import REFRESH_CLAIM_SECONDS
from service.connections.service import ConnectionService
from service.db.base import CONNECTION_ID
from service.db.unit import unit_of_work
from service.errors import ReauthorizationRequired
from service.oauth_client import CALL_DEADLINE_SECONDS

logger = logging.getLogger("elicitd.connections.probes")

API_KEY = "api_key"  # an API-key connection's ``token_type``


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """One key's check, as the kind builds it; its headers carry the key, so no repr shows them."""

    method: str
    url: str
    headers: Mapping[str, str] = field(repr=False)
    timeout_seconds: float = 10.0


# The request that checks ``key`` of a connection with these non-secret ``fields``.
KeyRequest = Callable[[str, Mapping[str, str]], ProbeRequest]


@runtime_checkable
class KeyProbes(Protocol):
    """What a kind whose connections keep a key on their own row gives the probe pass."""

    async def probeable(self) -> Mapping[str, KeyRequest]:
        """The kind's enabled providers whose definition names a check, each with its request."""
        ...


# Live API-key connections not checked for the interval, least recently checked first; the
# claim is the row's refresh claim (an API key is never refreshed, so only probes take it).
# ``COALESCE(checked_at, '-infinity')`` is the key of ``ix_connections_key_probe`` (0019): an
# index scan that stops after ``:batch`` rows, however many keys are stored.
_CLAIM_DUE = (
    "UPDATE connections c SET refresh_claim = :claim, refresh_claimed_until = now() + make_interval(secs => :hold) "
    "FROM (SELECT id FROM connections "
    f"WHERE status = '{ACTIVE}' AND token_type = '{API_KEY}' AND health IN ('{HEALTHY}', '{EXPIRING}') "
    "AND provider = ANY(:providers) AND access_token_enc IS NOT NULL AND access_token_key_id IS NOT NULL "
    "AND (refresh_claimed_until IS NULL OR refresh_claimed_until <= now()) "
    "AND COALESCE(checked_at, '-infinity') <= now() - make_interval(secs => :interval) "
    "ORDER BY COALESCE(checked_at, '-infinity'), id LIMIT :batch FOR UPDATE SKIP LOCKED) d "
    "WHERE c.id = d.id RETURNING c.*"
)

# The key was accepted: checked now, the claim ended — only while the claim is still this pass's
# and the row still this key's (a key entered again meanwhile ends the claim, and wins).
_CHECKED = (
    "UPDATE connections SET checked_at = now(), refresh_claim = NULL, refresh_claimed_until = NULL "
    f"WHERE id = :id AND refresh_claim = :claim AND status = '{ACTIVE}'"
)

_RELEASE = (
    "UPDATE connections SET refresh_claim = NULL, refresh_claimed_until = NULL "
    "WHERE id = :id AND refresh_claim = :claim"
)

# The key was refused: the row stops being served and its key is wiped, with the health events,
# in one statement (``health.transition(..., key=True)``).
_REFUSED = (
    f"UPDATE connections a SET status = '{REAUTHORIZATION_REQUIRED}', health = '{NEEDS_REAUTHORIZATION}', "
    "health_reason = :reason, health_http_status = CAST(:http_status AS integer), checked_at = now(), "
    "access_token_enc = NULL, access_token_key_id = NULL, refresh_claim = NULL, refresh_claimed_until = NULL, "
    "updated_at = now() "
    "FROM (SELECT id, health AS before FROM connections WHERE id = :id AND refresh_claim = :claim "
    f"AND status = '{ACTIVE}' FOR UPDATE) b WHERE a.id = b.id RETURNING {health.MOVED_KEY}"
)


async def claim_due(
    session: AsyncSession, *, claim: uuid.UUID, providers: list[str], interval_seconds: float, batch: int
) -> list[Connection]:
    if not providers:
        return []
    stmt = select(Connection).from_statement(text(_CLAIM_DUE)).execution_options(populate_existing=True)
    params: dict[str, Any] = {
        "claim": claim,
        "hold": REFRESH_CLAIM_SECONDS,
        "providers": providers,
        "interval": interval_seconds,
        "batch": batch,
    }
    return list((await session.execute(stmt, params)).scalars())


def _fields(conn: Connection) -> dict[str, str]:
    return {str(k): str(v) for k, v in (conn.fields or {}).items() if v is not None}


class KeyProbePass:
    """The API-key half of a probe pass; the ``Prober`` claims, paces and rests for both halves."""

    def __init__(
        self, connections: ConnectionService, kinds: Sequence[KeyProbes], *, rest: Callable[[str], None]
    ) -> None:
        self.connections = connections
        self.kinds = tuple(kinds)
        # Back a provider off after an inconclusive answer (the prober's rest, shared with OAuth).
        self.rest = rest

    async def probeable(self) -> dict[str, KeyRequest]:
        found: dict[str, KeyRequest] = {}
        for kind in self.kinds:
            found.update(await kind.probeable())
        return found

    async def claim(
        self, claim: uuid.UUID, providers: list[str], *, interval_seconds: float, batch: int
    ) -> list[Connection]:
        async with unit_of_work(self.connections.sessions) as session:
            return await claim_due(
                session, claim=claim, providers=providers, interval_seconds=interval_seconds, batch=batch
            )

    async def release(self, connection_id: uuid.UUID, claim: uuid.UUID) -> None:
        async with unit_of_work(self.connections.sessions) as session:
            await session.execute(text(_RELEASE), {"id": connection_id, "claim": claim})

    async def probe(self, conn: Connection, claim: uuid.UUID, request_for: KeyRequest) -> str:
        service = self.connections
        settled = False
        try:
            try:
                key = service.seal.api_key(conn)
            except ReauthorizationRequired:
                key = None  # unreadable: the token endpoint says so when asked; a probe cannot tell more
            if key is None:
                return UNKNOWN
            verdict = await self._call(conn.provider, request_for(key, _fields(conn)))
            del key
            if verdict.outcome == UNKNOWN:
                self.rest(conn.provider)
                return UNKNOWN
            async with unit_of_work(service.sessions) as session:
                if verdict.outcome == OK:
                    await session.execute(text(_CHECKED), {"id": conn.id, "claim": claim})
                    settled = True
                    return OK
                params = {"id": conn.id, "claim": claim, "reason": verdict.reason, "http_status": verdict.http_status}
                moved = await health.transition(session, _REFUSED, params, key=True)
            settled = True
            await service.announce(moved.told)
            logger.info(
                "probe found the API key refused",
                extra={
                    "connection_id": CONNECTION_ID.format(conn.id),
                    "provider": conn.provider,
                    "code": verdict.reason,
                },
            )
            return verdict.outcome
        finally:
            if not settled:
                await self.release(conn.id, claim)

    async def _call(self, provider: str, request: ProbeRequest) -> Verdict:
        # Never longer than the claim covers: it must outlive the call (``REFRESH_CLAIM_SECONDS``).
        deadline = min(request.timeout_seconds, CALL_DEADLINE_SECONDS)
        try:
            async with asyncio.timeout(deadline):
                response = await self.connections.http.request(
                    request.method, request.url, headers=dict(request.headers), timeout=deadline
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            # The exception's text may quote the request; only its type is logged.
            logger.warning("probe call failed", extra={"provider": provider, "error_type": type(exc).__name__})
            return Verdict(UNKNOWN)
        return key_verdict(response)
