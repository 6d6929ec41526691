"""Refreshing a token: one flight per process, one claim across replicas, nothing held meanwhile.

Many requests on many replicas may want the same near-expiry token at once, providers that rotate
refresh tokens treat a second use of one as theft (RFC 9700 §4.14) and revoke the whole grant, and
a provider may take its time (15 s) to answer. So:

1. **One flight per process.** The first caller starts the refresh of an authorization as a task;
   every later caller in the process awaits that task instead of starting another.
2. **One claim across replicas.** The flight claims the refresh with one conditional ``UPDATE``
   (``authorizations.claim_refresh``): active, still due, and no unexpired claim by anyone else.
   Exactly one replica's statement matches; the claim lapses by itself after
   ``REFRESH_CLAIM_SECONDS``, longer than the provider call may take.
3. **The provider call holds nothing**: no pooled connection, no transaction, no row lock. A slow
   provider costs one task, never the pool.
4. **A conditional write** stores the result only while the claim is still this flight's and the
   authorization still active (``authorizations.store_refreshed``); a reconnect or a revocation in
   the meantime wins.
5. **A loser reads the winner's token**: a flight that finds another replica's claim looks at the
   row again after short pauses (on the injected clock) until the new token is there, the claim is
   gone, or ``REFRESH_WAIT_SECONDS`` have passed.

The timeouts involved are chosen against each other; the rule is in ``service/db/engine.py``
("Timeouts").
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from service.clock import Clock
from service.connections import authorizations as authz
from service.connections import oauth
from service.connections.errors import NoRefreshToken, RefreshFailed, database_busy, reconnect_required
from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, Authorization
from service.connections.parts import ConnectionParts
from service.connections.per_connection import for_authorization
from service.connections.providers import ResolvedProvider
from service.connections.schemas import TokenResponse
from service.connections.sealing import token_binding
from service.db.base import CONNECTION_ID
from service.db.errors import classify
from service.db.unit import unit_of_work
from service.errors import NotConnected, ReauthorizationRequired, ServiceUnavailable

logger = logging.getLogger("elicitd.connections")

# The claim outlives the provider call it covers (its whole deadline) plus time to write the result,
# so it cannot lapse while the call may still reach the provider; a caller waiting on another
# replica's refresh waits as long as a claim lasts. See "Timeouts" in service/db/engine.py.
REFRESH_CLAIM_SECONDS = oauth.CALL_DEADLINE_SECONDS + 5.0
REFRESH_WAIT_SECONDS = REFRESH_CLAIM_SECONDS
# Pauses between looks at a row another replica is refreshing: short at first, then backing off.
REFRESH_POLL_FIRST_SECONDS = 0.05
REFRESH_POLL_MAX_SECONDS = 0.5
# Health reasons that are not a provider's error code.
ACCESS_TOKEN_EXPIRED = "access_token_expired"


class Refreshes:
    """The refreshes of one process: the token endpoint's (``join``), an operator's (forced) and
    the proactive pass's (``refresh_claimed``, under the pass's own claim) share the provider call
    and the conditional write."""

    def __init__(
        self,
        parts: ConnectionParts,
        *,
        clock: Clock,
        margin_seconds: float,
        expiring_seconds: float,
        on_refresh: Callable[[str, str], None] | None = None,
        refreshed_events: bool = False,
    ) -> None:
        self.parts = parts
        # ``connection.refreshed`` to the grantees of every refresh (``ELICITD_REFRESH_EVENTS``).
        self.refreshed_events = refreshed_events
        self.clock = clock
        self.margin = margin_seconds
        self.expiring_seconds = expiring_seconds
        # ``(provider, outcome)`` after each refresh attempt (the metrics' refresh counter).
        self.on_refresh = on_refresh
        # The refresh in flight per (authorization, forced) in this process: later callers await it.
        self._flights: dict[tuple[uuid.UUID, bool], asyncio.Task[TokenResponse]] = {}

    def _refreshed(self, provider: str, outcome: str) -> None:
        if self.on_refresh is not None:
            self.on_refresh(provider, outcome)

    async def join(self, authorization_id: uuid.UUID, *, force: bool = False) -> TokenResponse:
        """Join this process's refresh of the authorization, or start it.

        The refresh runs as its own task, so a caller that gives up (a client disconnecting) does
        not cancel it for the others waiting on it."""
        key = (authorization_id, force)
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.create_task(self._flight(authorization_id, force=force))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        with database_busy():
            return await asyncio.shield(flight)

    async def aclose(self) -> None:
        """Stop the refreshes in flight (on shutdown): each gives its claim up on the way out, so
        another replica need not wait for it to lapse."""
        flights = list(self._flights.values())
        for flight in flights:
            flight.cancel()
        await asyncio.gather(*flights, return_exceptions=True)

    def _landed(self, key: tuple[uuid.UUID, bool], flight: asyncio.Task[TokenResponse]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved: whoever awaited it got it; nobody else needs a warning

    async def _flight(self, authorization_id: uuid.UUID, *, force: bool) -> TokenResponse:
        claim = uuid.uuid4()
        deadline = self.clock.monotonic() + REFRESH_WAIT_SECONDS
        pause = REFRESH_POLL_FIRST_SECONDS
        provider: ResolvedProvider | None = None
        while True:
            async with self.parts.read_sessions() as session:
                view = await authz.refresh_view(session, authorization_id, self.margin)
            if view is None:
                raise NotConnected("The connection no longer exists.")
            auth, login = view.authorization, view.account_login
            if auth.status == REAUTHORIZATION_REQUIRED:
                raise reconnect_required(auth.connection_id)
            if auth.status != ACTIVE:
                raise NotConnected("The connection was revoked.")
            if not view.due and not force:
                return self.parts.seal.answer(auth, login)  # refreshed by another caller meanwhile
            if auth.refresh_token_enc is None or not auth.refresh_token_key_id:
                return await self._without_refresh_token(auth, login, expired=view.expired, force=force)
            if not view.claimed:
                # Discovery may fetch metadata: before the claim, so the claim covers only the call.
                provider = provider or await self.parts.provider(auth.provider)
                async with unit_of_work(self.parts.sessions) as session:
                    claimed = await authz.claim_refresh(
                        session,
                        authorization_id,
                        claim=claim,
                        hold_seconds=REFRESH_CLAIM_SECONDS,
                        margin_seconds=self.margin,
                        force=force,
                    )
                if claimed is not None:
                    answer = await self._refresh_claimed(
                        claimed[0], login, claim, provider, expired=claimed[1], force=force
                    )
                    if answer is not None:
                        return answer
                    # Overtaken (a reconnect, a revocation): what is stored now is the answer.
                    force = False
                continue  # someone else claimed or refreshed first: look again
            if self.clock.monotonic() >= deadline:
                logger.warning(
                    "refresh wait timed out",
                    extra={"connection_id": CONNECTION_ID.format(auth.connection_id), "provider": auth.provider},
                )
                if not view.expired and not force:
                    return self.parts.seal.answer(auth, login)  # still valid for a moment: better than an error
                raise ServiceUnavailable(
                    "Another refresh of this connection is taking long; retry shortly.", headers={"Retry-After": "2"}
                )
            await self.clock.sleep(pause)
            pause = min(pause * 2, REFRESH_POLL_MAX_SECONDS)

    async def _without_refresh_token(
        self, auth: Authorization, login: str | None, *, expired: bool, force: bool
    ) -> TokenResponse:
        if force:
            raise NoRefreshToken(
                "The provider gave this connection no refresh token; it cannot be "
                "refreshed, only reconnected when it expires."
            )
        if not expired:
            return self.parts.seal.answer(auth, login)
        async with unit_of_work(self.parts.sessions) as session:
            moved = await authz.mark_reauthorization_required(session, auth.id, reason=ACCESS_TOKEN_EXPIRED)
        await self.parts.announce(moved.told)
        raise reconnect_required(auth.connection_id)

    async def _refresh_claimed(
        self,
        auth: Authorization,
        login: str | None,
        claim: uuid.UUID,
        provider: ResolvedProvider,
        *,
        expired: bool,
        force: bool,
    ) -> TokenResponse | None:
        """The provider call under this flight's claim, with no connection held. None when the
        result could not be stored because the authorization changed meanwhile."""
        settled = False
        ref = CONNECTION_ID.format(auth.connection_id)
        try:
            refresh_token = self.parts.seal.refresh_token(auth)
            if refresh_token is None:
                return None  # removed since the look before the claim: the next look decides
            try:
                # The same shop (connection parameters) and token server as the code exchange.
                talk_to = for_authorization(provider, auth.parameters, auth.metadata_)
                tokens = await oauth.refresh(self.parts.http, talk_to, refresh_token)
            except oauth.ProviderError as exc:
                if exc.error == "invalid_grant":
                    # The provider dropped the grant (the user revoked it there, a password change,
                    # an ended or reused refresh token): only a person can bring it back.
                    async with unit_of_work(self.parts.sessions) as session:
                        moved = await authz.mark_reauthorization_required(
                            session, auth.id, reason=exc.error, http_status=exc.status, claim=claim
                        )
                    settled = True
                    await self.parts.announce(moved.told)
                    self._refreshed(auth.provider, "reauthorization_required")
                    logger.info(
                        "connection needs reauthorization",
                        extra={"connection_id": ref, "provider": auth.provider, "code": "invalid_grant"},
                    )
                    raise reconnect_required(auth.connection_id) from None
                logger.warning(
                    "token refresh failed", extra={"connection_id": ref, "provider": auth.provider, "code": exc.error}
                )
                self._refreshed(auth.provider, "failed")
                if not expired and not force:
                    return self.parts.seal.answer(auth, login)  # still valid for a moment: better than an error
                raise RefreshFailed(
                    "The provider failed to refresh the token; retry later.", extra={"provider_error": exc.error}
                ) from None
            sealed = self.parts.seal.seal_tokens(auth.id, token_binding(auth), tokens)
            async with unit_of_work(self.parts.sessions) as session:
                updated, moved = await authz.store_refreshed(
                    session,
                    auth.id,
                    claim,
                    sealed,
                    # Omitted means unchanged (RFC 6749 §6); present, it is read as the code exchange reads it.
                    scopes=oauth.split_scopes(tokens.scope, provider.scope_separator) if tokens.scope else None,
                    rotated=tokens.refresh_token != refresh_token,
                    expiring_seconds=self.expiring_seconds,
                    announce=self.refreshed_events,
                )
                if updated is not None:
                    await authz.sync_connection(session, auth.connection_id)
            settled = True
            await self.parts.announce(moved.told)
            if updated is None:
                self._refreshed(auth.provider, "discarded")
                logger.warning(
                    "refreshed token not stored: the connection changed meanwhile",
                    extra={"connection_id": ref, "provider": auth.provider},
                )
                return None
            self._refreshed(auth.provider, "refreshed")
            logger.info("token refreshed", extra={"connection_id": ref, "provider": auth.provider})
            return self.parts.seal.answer(updated, login)
        finally:
            if not settled:
                await self.release(auth.id, claim)

    async def refresh_claimed(self, auth: Authorization, claim: uuid.UUID, provider: ResolvedProvider) -> str:
        """The proactive pass's refresh of an authorization it claimed (``authorizations.claim_due``):
        the same provider call and conditional write as the token endpoint's, its outcome as a word
        — ``refreshed``, ``needs_reauthorization`` (the provider refused the grant, marked),
        ``failed`` (transient: nothing marked, the claim given up) or ``discarded`` (changed
        meanwhile)."""
        try:
            answer = await self._refresh_claimed(auth, None, claim, provider, expired=False, force=True)
        except ReauthorizationRequired:
            return "needs_reauthorization"
        except RefreshFailed:
            return "failed"
        return "discarded" if answer is None else "refreshed"

    async def release(self, authorization_id: uuid.UUID, claim: uuid.UUID) -> None:
        """End a claim early so the next caller need not wait for it to lapse (best effort)."""
        try:
            async with unit_of_work(self.parts.sessions) as session:
                await authz.release_refresh_claim(session, authorization_id, claim)
        except (DBAPIError, OSError) as exc:
            logger.warning(
                "refresh claim not released; it lapses by itself",
                extra={"code": str(classify(exc))},
            )
