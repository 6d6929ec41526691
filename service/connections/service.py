"""Connections: finishing an authorization, handing out (and refreshing) tokens, revoking.

Refresh is the delicate part. Many requests on many replicas may want the same near-expiry token
at once, providers that rotate refresh tokens treat a second use of one as theft (RFC 9700 §4.14)
and revoke the whole grant, and a provider may take its time (15 s) to answer. So:

1. **One flight per process.** The first caller starts the refresh of a connection as a task;
   every later caller in the process awaits that task instead of starting another.
2. **One claim across replicas.** The flight claims the refresh with one conditional ``UPDATE``
   (``repository.claim_refresh``): active, still due, and no unexpired claim by anyone else.
   Exactly one replica's statement matches; the claim lapses by itself after
   ``REFRESH_CLAIM_SECONDS``, longer than the provider call may take.
3. **The provider call holds nothing**: no pooled connection, no transaction, no row lock. A slow
   provider costs one task, never the pool.
4. **A conditional write** stores the result only while the claim is still this flight's and the
   connection still active (``repository.store_refreshed``); a reconnect or a revocation in the
   meantime wins.
5. **A loser reads the winner's token**: a flight that finds another replica's claim looks at the
   row again after short pauses (on the injected clock) until the new token is there, the claim is
   gone, or ``REFRESH_WAIT_SECONDS`` have passed.

Revocation and provider discovery follow the same shape: read what is needed and let the session
go, call out, then write conditionally. The timeouts involved are chosen against each other; the
rule is in ``service/db/engine.py`` ("Timeouts").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import msgspec
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.connections import authorizations as authz
from service.connections import oauth
from service.connections import repository as repo
from service.connections.discovery import MetadataCache
from service.connections.models import (
    ACTIVE,
    REAUTHORIZATION_REQUIRED,
    REVOKED,
    Authorization,
    Connection,
    OAuthState,
)
from service.connections.providers import ResolvedProvider, UnknownProvider, get_provider, resolve
from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.db.base import CONNECTION_ID, uuid7
from service.db.direct import DirectStatements
from service.db.errors import TRANSIENT, classify
from service.db.unit import unit_of_work
from service.errors import (
    Conflict,
    NotConnected,
    ReauthorizationRequired,
    ServiceUnavailable,
    UpstreamError,
)
from service.events import repository as events_repo
from service.flows.kinds import check_issuer_trusted, check_provider_allowed
from service.grants import integrity
from service.grants import repository as grant_repo
from service.grants.models import GRANT_ID
from service.identity.keys import AuthenticatedClient

logger = logging.getLogger("elicitd.connections")

ACCESS_TOKEN = "access_token"
REFRESH_TOKEN = "refresh_token"
PKCE_VERIFIER = "pkce_verifier"
REFRESH_MARGIN_SECONDS = 60.0
# A connection is ``expiring`` when, without a person, it stops working within this long (its
# refresh token's own end): a week leaves time to read an email and reconnect.
EXPIRING_SECONDS = 7 * 86400.0
# The claim outlives the provider call it covers (its whole deadline) plus time to write the result,
# so it cannot lapse while the call may still reach the provider; a caller waiting on another
# replica's refresh waits as long as a claim lasts. See "Timeouts" in service/db/engine.py.
REFRESH_CLAIM_SECONDS = oauth.CALL_DEADLINE_SECONDS + 5.0
REFRESH_WAIT_SECONDS = REFRESH_CLAIM_SECONDS
# Pauses between looks at a row another replica is refreshing: short at first, then backing off.
REFRESH_POLL_FIRST_SECONDS = 0.05
REFRESH_POLL_MAX_SECONDS = 0.5
DB_RETRY_AFTER_SECONDS = 1
# Health reasons that are not a provider's error code.
ACCESS_TOKEN_EXPIRED = "access_token_expired"


class InsufficientScope(Conflict):
    code = "insufficient_scope"
    title = "The connection lacks requested scopes"


class RefreshFailed(UpstreamError):
    code = "provider_refresh_failed"
    title = "The provider did not refresh the token"


class AuthorizationExceedsGrant(Conflict):
    code = "authorization_exceeds_grant"
    title = "The token holds scopes the grant does not"


class AccountMismatch(Conflict):
    code = "account_mismatch"
    title = "The provider answered for another account"


class NoRefreshToken(Conflict):
    code = "no_refresh_token"
    title = "The connection has no refresh token"


class TokenResponse(msgspec.Struct, omit_defaults=True):
    access_token: str
    token_type: str
    connection_id: str
    provider: str
    account_id: str
    scopes: list[str]
    expires_at: datetime | None = None
    account_login: str | None = None


class RevokeResponse(msgspec.Struct):
    # Connections disconnected for everyone (the server that connected them asked, or an operator).
    revoked: list[str]
    revoked_at_provider: bool
    # This server client's own grants ended (it was granted the account, another server connected it).
    grants_revoked: list[str] = msgspec.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Completed:
    connection: Connection
    authorization: Authorization
    result: dict[str, Any]
    # Server clients told the connection recovered (a reconnect in place): wake them after the commit.
    told: list[uuid.UUID] = dataclasses.field(default_factory=list)


def connection_result(conn: Connection) -> dict[str, Any]:
    """What a completed flow tells the MCP server. Never the token: that is the token endpoint's job."""
    return {
        "connection_id": CONNECTION_ID.format(conn.id),
        "provider": conn.provider,
        "account_id": conn.account_id,
        "account_login": conn.account_login,
        "scopes": list(conn.scopes or []),
    }


def token_binding(conn: Connection | Authorization | authz.TokenRow) -> tuple[str, str, str, str]:
    """Whose a connection's secrets are, bound into their associated data beside the owner (the
    connection's id for an API key, the authorization's for OAuth tokens) and the purpose: the
    subject (issuer and ``sub``), the provider and the provider account. The same four columns, in
    this order, are ``bound_sql`` of the token columns in ``crypto.columns``."""
    return (conn.subject_iss, conn.subject_sub, conn.provider, conn.account_id)


def granted_scopes(tokens: oauth.TokenSet, requested: list[str], separator: str) -> list[str]:
    """RFC 6749 §5.1: ``scope`` is returned only when it differs from the request."""
    if tokens.scope is None:
        return sorted(set(requested))
    return oauth.split_scopes(tokens.scope, separator)


class ConnectionService:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        read_sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        metadata: MetadataCache,
        http: httpx.AsyncClient,
        direct: DirectStatements,
        clock: Clock | None = None,
        refresh_margin_seconds: float = REFRESH_MARGIN_SECONDS,
        expiring_seconds: float = EXPIRING_SECONDS,
        on_refresh: Callable[[str, str], None] | None = None,
        on_events: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.read_sessions = read_sessions
        # The token endpoint's one read: a statement on the driver, no ORM instances.
        self.direct = direct
        self.vault = vault
        self.metadata = metadata
        self.http = http
        self.clock = clock or SystemClock()
        self.margin = refresh_margin_seconds
        self.expiring_seconds = expiring_seconds
        # ``(provider, outcome)`` after each refresh attempt (the metrics' refresh counter).
        self.on_refresh = on_refresh
        # After a commit that appended stream events: wake those server clients' streams.
        self.on_events = on_events
        # The refresh in flight per (connection, forced) in this process: later callers await it.
        self._flights: dict[tuple[uuid.UUID, bool], asyncio.Task[TokenResponse]] = {}

    async def announce(self, server_client_ids: list[uuid.UUID]) -> None:
        """Wake these server clients' event streams (after the commit that appended their events)."""
        if server_client_ids and self.on_events is not None:
            await self.on_events(server_client_ids)

    def _refreshed(self, provider: str, outcome: str) -> None:
        if self.on_refresh is not None:
            self.on_refresh(provider, outcome)

    # ---- providers -------------------------------------------------------------------------------
    async def provider(self, name: str) -> ResolvedProvider:
        """The provider ready to talk to. Its row is read in a session of its own, which is let go
        before discovery (a network fetch when the metadata is not cached) runs."""
        async with self.read_sessions() as session:
            row = await get_provider(session, name)
        if row is None or not row.enabled:
            raise UnknownProvider(f"No enabled provider is named '{name}'.")
        return await resolve(row, self.vault, self.metadata)

    # ---- secrets -----------------------------------------------------------------------------------
    def seal_verifier(self, state_id: uuid.UUID, verifier: str) -> tuple[str, bytes]:
        return self.vault.encrypt(verifier, owner=str(state_id), purpose=PKCE_VERIFIER)

    def open_verifier(self, state: OAuthState) -> str:
        return self.vault.decrypt_text(
            state.verifier_key_id, state.verifier_enc, owner=str(state.id), purpose=PKCE_VERIFIER
        )

    def _seal_tokens(self, owner_id: uuid.UUID, bound: tuple[str, ...], tokens: oauth.TokenSet) -> dict[str, Any]:
        owner = CONNECTION_ID.format(owner_id)
        access_kid, access = self.vault.encrypt(tokens.access_token, owner=owner, purpose=ACCESS_TOKEN, bound=bound)
        refresh_kid, refresh = (None, None)
        if tokens.refresh_token is not None:
            refresh_kid, refresh = self.vault.encrypt(
                tokens.refresh_token, owner=owner, purpose=REFRESH_TOKEN, bound=bound
            )
        return {
            "access_enc": access,
            "access_kid": access_kid,
            "refresh_enc": refresh,
            "refresh_kid": refresh_kid,
            "token_type": tokens.token_type,
            "expires_in": tokens.expires_in,
            "refresh_expires_in": tokens.refresh_expires_in,
            "expiring_seconds": self.expiring_seconds,
        }

    def _open(self, auth: Authorization, purpose: str) -> str | None:
        if purpose == ACCESS_TOKEN:
            return self._decrypt(auth, auth.access_token_key_id, auth.access_token_enc, purpose)
        if purpose == REFRESH_TOKEN:
            return self._decrypt(auth, auth.refresh_token_key_id, auth.refresh_token_enc, purpose)
        return None

    def _decrypt(
        self, auth: Authorization | authz.TokenRow, key_id: str | None, sealed: bytes | None, purpose: str
    ) -> str | None:
        if sealed is None or not key_id:
            return None
        # The owner is the authorization's id in the connection-id form: an authorization made by
        # migration 0012 has its connection's id, so tokens sealed before it still open.
        owner = CONNECTION_ID.format(auth.id)
        try:
            # Values stored before the owner's fields were bound open the old way only while the
            # operator accepts them for an upgrade (``service.crypto.vault``).
            return self.vault.decrypt_text(
                key_id,
                sealed,
                owner=owner,
                purpose=purpose,
                bound=token_binding(auth),
                unbound_ok=self.vault.accept_unbound,
            )
        except SealError as exc:
            # Its key left the ring, or the value was altered or moved (to another row, person,
            # provider or account): nothing usable is stored, and the way out is to connect again.
            ref = CONNECTION_ID.format(auth.connection_id)
            logger.error("stored token cannot be decrypted", extra={"connection_id": ref})
            raise ReauthorizationRequired(
                "The stored credentials for this connection cannot be read; connect the account again.",
                extra={"connection_id": ref},
            ) from exc

    # ---- completing an authorization -------------------------------------------------------------
    async def store_authorization(
        self,
        session: AsyncSession,
        *,
        iss: str,
        sub: str,
        provider: ResolvedProvider,
        tokens: oauth.TokenSet,
        account_id: str,
        account_login: str | None,
        requested: list[str],
        reconnect: uuid.UUID | None,
        in_place: uuid.UUID | None = None,
        connected_by: uuid.UUID | None = None,
    ) -> Completed:
        """Write the tokens into the caller's transaction (the flow's completion commits them), as a
        new authorization of the account's connection — or, with ``in_place``, into that
        authorization (a reauthorization for the same scopes: every grant on it recovers).

        A flow that names a connection (``reconnect``: a reconnect, more scopes, or a separate
        authorization beside another server's) must come back for that connection's provider
        account: another account raises ``AccountMismatch`` and nothing is written."""
        if reconnect is not None:
            if not await repo.reclaim(session, reconnect, account_id, account_login):
                raise AccountMismatch(
                    f"{provider.display_name} answered for another account than the one connected.",
                    extra={"connection_id": CONNECTION_ID.format(reconnect)},
                )
            connection_id = reconnect
        else:
            connection_id = await repo.claim_slot(
                session,
                iss=iss,
                sub=sub,
                provider=provider.name,
                account_id=account_id,
                account_login=account_login,
                connected_by=connected_by,
            )
        bound = (iss, sub, provider.name, account_id)
        scopes = granted_scopes(tokens, requested, provider.scope_separator)
        stored: Authorization | None = None
        told: list[uuid.UUID] = []
        if in_place is not None:
            values = self._seal_tokens(in_place, bound, tokens)
            stored, moved = await authz.replace_tokens(session, in_place, connection_id, {**values, "scopes": scopes})
            told = moved.told
        if stored is None:
            # A connection's first authorization takes the connection's id (as migration 0012 gave
            # the existing ones): one id to follow in logs for the common one-server account. Known
            # before sealing, since it is the tokens' owner; stable under the connection's row lock.
            new_id = uuid7() if await authz.exists(session, connection_id) else connection_id
            values = self._seal_tokens(new_id, bound, tokens)
            stored = await authz.insert(session, new_id, connection_id, {**values, "scopes": scopes})
        await authz.sync_connection(session, connection_id)
        conn = await session.get(Connection, connection_id, populate_existing=True)
        assert conn is not None  # row-locked by reclaim/claim_slot in this transaction
        result = {**connection_result(conn), "scopes": list(stored.scopes)}
        return Completed(connection=conn, authorization=stored, result=result, told=told)

    async def retire(self, authorization_ids: list[uuid.UUID]) -> bool:
        """Authorizations no live grant points at any more (a grantee moved to a new one, or its
        grant was revoked): revoked at the provider (RFC 7009), then here. After the commit that
        replaced them, with no session open during the provider calls. Whether the provider
        accepted a revocation."""
        if not authorization_ids:
            return False
        async with self.read_sessions() as session:
            idle = await authz.unreferenced(session, authorization_ids)
        if not idle:
            return False
        at_provider = await self._revoke_at_provider(idle[0].provider, idle)
        async with unit_of_work(self.sessions) as session:
            retired = await authz.mark_revoked(session, [a.id for a in idle])
            for connection_id in {a.connection_id for a in idle}:
                await authz.sync_connection(session, connection_id)
        for auth in idle:
            logger.info(
                "authorization retired",
                extra={"connection_id": CONNECTION_ID.format(auth.connection_id), "provider": auth.provider},
            )
        return at_provider and bool(retired)

    # ---- the token endpoint ----------------------------------------------------------------------
    async def _live(
        self, client: AuthenticatedClient, provider: str, iss: str, sub: str, account: str | None
    ) -> list[tuple[Connection, grant_repo.ClientGrant]]:
        """The subject's live connections to ``provider`` that ``client`` holds a grant on, each with
        that grant, after the access checks; ``not_connected`` when there is none."""
        check_provider_allowed(client, provider)
        check_issuer_trusted(client, iss)
        with _database_busy():
            async with self.read_sessions() as session:
                found = await repo.live_connections(session, iss=iss, sub=sub, provider=provider, account=account)
                # Only connections this client was granted: any other is answered as absent.
                granted = await grant_repo.client_grants(session, client.id, [conn.id for conn in found])
        live = [(conn, granted[conn.id]) for conn in found if conn.id in granted]
        if not live:
            raise NotConnected(f"The subject has no connection to '{provider}'.")
        return live

    async def _live_tokens(
        self, client: AuthenticatedClient, provider: str, iss: str, sub: str, account: str | None
    ) -> list[tuple[authz.TokenRow, bool]]:
        """The client's grants on the subject's connections to ``provider``, each with its
        authorization, read as one statement on the driver (``service.db.direct``). Rows whose MAC
        does not check (written by someone without the keys) are dropped, and logged."""
        check_provider_allowed(client, provider)
        check_issuer_trusted(client, iss)
        with _database_busy():
            rows = await self.direct.fetch(authz.PICK_FOR_TOKEN, iss, sub, provider, account, self.margin, client.id)
        found = []
        for row, due in authz.token_rows(rows):
            if integrity.intact(
                self.vault,
                mac_key_id=row.grant_mac_key_id,
                mac=row.grant_mac,
                connection_id=row.connection_id,
                authorization_id=row.grant_authorization,
                server_client_id=row.grant_client,
                trust_group_id=row.grant_group,
                scopes=row.grant_scopes,
            ):
                found.append((row, due))
            else:
                logger.error(
                    "grant integrity check failed; the grant is not honoured",
                    extra={"connection_id": CONNECTION_ID.format(row.connection_id)},
                )
        if not found:
            raise NotConnected(f"The subject has no connection to '{provider}'.")
        return found

    def _answer(self, auth: Authorization | authz.TokenRow, account_login: str | None) -> TokenResponse:
        token = self._decrypt(auth, auth.access_token_key_id, auth.access_token_enc, ACCESS_TOKEN)
        if token is None:
            raise ReauthorizationRequired(
                "The connection must be authorized again.",
                extra={"connection_id": CONNECTION_ID.format(auth.connection_id)},
            )
        return TokenResponse(
            access_token=token,
            token_type=auth.token_type,
            connection_id=CONNECTION_ID.format(auth.connection_id),
            provider=auth.provider,
            account_id=auth.account_id,
            account_login=account_login,
            # The authorization's own scopes: what this token really carries, and never more than
            # the grant (``token``), nor what other servers hold on the same account.
            scopes=sorted(auth.scopes or []),
            expires_at=auth.expires_at,
        )

    def _reauth(self, auth: Authorization | authz.TokenRow) -> ReauthorizationRequired:
        return ReauthorizationRequired(
            "The provider no longer accepts this connection; create an oauth_connect flow to reconnect it.",
            extra={"connection_id": CONNECTION_ID.format(auth.connection_id)},
        )

    async def token(
        self, client: AuthenticatedClient, provider: str, *, iss: str, sub: str, scopes: list[str], account: str | None
    ) -> TokenResponse:
        """The token of the authorization the client's grant points at — never another one — and
        only when it holds every scope asked and nothing the grant does not."""
        found = await self._live_tokens(client, provider, iss, sub, account)
        active = [item for item in found if item[0].status == ACTIVE]
        if not active:
            raise self._reauth(found[0][0])
        wanted = set(scopes)
        usable = [item for item in active if wanted <= set(item[0].grant_scopes) & set(item[0].scopes)]
        if not usable:
            row = active[0][0]
            missing = sorted(wanted - (set(row.grant_scopes) & set(row.scopes)))
            raise InsufficientScope(
                "The connection was not granted every requested scope; create an "
                "oauth_connect flow with them to ask the user.",
                extra={"missing": missing},
            )
        row, due = usable[0]
        if not set(row.scopes) <= set(row.grant_scopes):
            # The provider widened this token set (a merge on refresh): handing it out would give
            # more than the user granted this server.
            raise AuthorizationExceedsGrant(
                "This token carries scopes the user did not grant this server; create an oauth_connect flow.",
                extra={"connection_id": CONNECTION_ID.format(row.connection_id)},
            )
        if row.touch_due:
            await self._touch_grant(row)
        if not due:
            return self._answer(row, row.account_login)
        return await self._refresh(row.id)

    async def _touch_grant(self, row: authz.TokenRow) -> None:
        """Note the grant's last use (at most once a minute per grant, ``service.grants``). Only
        informative, so a database hiccup here costs the note, not the answer."""
        try:
            await self.direct.execute(authz.TOUCH, row.grant_id)
        except DBAPIError as exc:
            if classify(exc) not in TRANSIENT:
                raise
            logger.warning("grant use not recorded", extra={"connection_id": CONNECTION_ID.format(row.connection_id)})

    async def refresh_by_id(self, connection_id: uuid.UUID) -> Connection | None:
        """Refresh now whatever the expiry (operators), every active authorization of the
        connection, through the same claim as the token endpoint. Returns the updated row (never
        a token); None when there is no such row."""
        async with self.read_sessions() as session:
            conn = await session.get(Connection, connection_id)
            auths = await authz.live_of_connections(session, [connection_id])
        if conn is None:
            return None
        active = [a for a in auths if a.status == ACTIVE]
        if not active:
            if conn.status == REVOKED:
                raise NotConnected("The connection was revoked.")
            raise ReauthorizationRequired(
                "The provider no longer accepts this connection; create an oauth_connect flow to reconnect it.",
                extra={"connection_id": CONNECTION_ID.format(connection_id)},
            )
        for auth in active:
            await self._refresh(auth.id, force=True)
        async with self.read_sessions() as session:
            return await session.get(Connection, connection_id, populate_existing=True)

    async def _refresh(self, authorization_id: uuid.UUID, *, force: bool = False) -> TokenResponse:
        """Join this process's refresh of the authorization, or start it.

        The refresh runs as its own task, so a caller that gives up (a client disconnecting) does
        not cancel it for the others waiting on it."""
        key = (authorization_id, force)
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.create_task(self._refresh_flight(authorization_id, force=force))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        with _database_busy():
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

    async def _refresh_flight(self, authorization_id: uuid.UUID, *, force: bool) -> TokenResponse:
        claim = uuid.uuid4()
        deadline = self.clock.monotonic() + REFRESH_WAIT_SECONDS
        pause = REFRESH_POLL_FIRST_SECONDS
        provider: ResolvedProvider | None = None
        while True:
            async with self.read_sessions() as session:
                view = await authz.refresh_view(session, authorization_id, self.margin)
            if view is None:
                raise NotConnected("The connection no longer exists.")
            auth, login = view.authorization, view.account_login
            if auth.status == REAUTHORIZATION_REQUIRED:
                raise self._reauth(auth)
            if auth.status != ACTIVE:
                raise NotConnected("The connection was revoked.")
            if not view.due and not force:
                return self._answer(auth, login)  # refreshed by another caller meanwhile
            if auth.refresh_token_enc is None or not auth.refresh_token_key_id:
                return await self._without_refresh_token(auth, login, expired=view.expired, force=force)
            if not view.claimed:
                # Discovery may fetch metadata: before the claim, so the claim covers only the call.
                provider = provider or await self.provider(auth.provider)
                async with unit_of_work(self.sessions) as session:
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
                    return self._answer(auth, login)  # still valid for a moment: better than an error
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
            return self._answer(auth, login)
        async with unit_of_work(self.sessions) as session:
            moved = await authz.mark_reauthorization_required(session, auth.id, reason=ACCESS_TOKEN_EXPIRED)
        await self.announce(moved.told)
        raise self._reauth(auth)

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
            refresh_token = self._open(auth, REFRESH_TOKEN)
            if refresh_token is None:
                return None  # removed since the look before the claim: the next look decides
            try:
                tokens = await oauth.refresh(self.http, provider, refresh_token)
            except oauth.ProviderError as exc:
                if exc.error == "invalid_grant":
                    # The provider dropped the grant (the user revoked it there, a password change,
                    # an ended or reused refresh token): only a person can bring it back.
                    async with unit_of_work(self.sessions) as session:
                        moved = await authz.mark_reauthorization_required(
                            session, auth.id, reason=exc.error, http_status=exc.status, claim=claim
                        )
                    settled = True
                    await self.announce(moved.told)
                    self._refreshed(auth.provider, "reauthorization_required")
                    logger.info(
                        "connection needs reauthorization",
                        extra={"connection_id": ref, "provider": auth.provider, "code": "invalid_grant"},
                    )
                    raise self._reauth(auth) from None
                logger.warning(
                    "token refresh failed", extra={"connection_id": ref, "provider": auth.provider, "code": exc.error}
                )
                self._refreshed(auth.provider, "failed")
                if not expired and not force:
                    return self._answer(auth, login)  # still valid for a moment: better than an error
                raise RefreshFailed(
                    "The provider failed to refresh the token; retry later.", extra={"provider_error": exc.error}
                ) from None
            values = self._seal_tokens(auth.id, token_binding(auth), tokens)
            # Omitted means unchanged (RFC 6749 §6); present, it is read as the code exchange reads it.
            values["scopes"] = oauth.split_scopes(tokens.scope, provider.scope_separator) if tokens.scope else None
            values["rotated"] = tokens.refresh_token != refresh_token
            async with unit_of_work(self.sessions) as session:
                updated, moved = await authz.store_refreshed(session, auth.id, claim, values)
                if updated is not None:
                    await authz.sync_connection(session, auth.connection_id)
            settled = True
            await self.announce(moved.told)
            if updated is None:
                self._refreshed(auth.provider, "discarded")
                logger.warning(
                    "refreshed token not stored: the connection changed meanwhile",
                    extra={"connection_id": ref, "provider": auth.provider},
                )
                return None
            self._refreshed(auth.provider, "refreshed")
            logger.info("token refreshed", extra={"connection_id": ref, "provider": auth.provider})
            return self._answer(updated, login)
        finally:
            if not settled:
                await self._release(auth.id, claim)

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
        await self._release(authorization_id, claim)

    async def _release(self, authorization_id: uuid.UUID, claim: uuid.UUID) -> None:
        """End a claim early so the next caller need not wait for it to lapse (best effort)."""
        try:
            async with unit_of_work(self.sessions) as session:
                await authz.release_refresh_claim(session, authorization_id, claim)
        except (DBAPIError, OSError) as exc:
            logger.warning(
                "refresh claim not released; it lapses by itself",
                extra={"code": str(classify(exc))},
            )

    # ---- revocation ------------------------------------------------------------------------------
    async def revoke(
        self, client: AuthenticatedClient, provider_name: str, *, iss: str, sub: str, account: str | None
    ) -> RevokeResponse:
        """``DELETE /v1/connections/{provider}``. The server client that connected the account
        disconnects it for everyone; a server that was only granted it ends its own grant (and its
        authorization, when nobody else holds that one), and every other server keeps its access."""
        found = await self._live(client, provider_name, iss, sub, account)
        owned = [conn for conn, _ in found if conn.connected_by == client.id]
        granted = [(conn, grant) for conn, grant in found if conn.connected_by != client.id]
        at_provider = False
        revoked: list[uuid.UUID] = []
        if owned:
            answer = await self._disconnect([c.id for c in owned], provider_name, reason=authz.DISCONNECTED)
            revoked, at_provider = answer
        ended: list[uuid.UUID] = []
        if granted:
            with _database_busy():
                async with unit_of_work(self.sessions) as session:
                    for _, grant in granted:
                        if await grant_repo.revoke(session, grant.grant_id, by="grantee"):
                            ended.append(grant.grant_id)
                    told = await events_repo.grants_revoked(session, ended)
            await self.announce(told)
            retired = await self.retire([g.authorization_id for _, g in granted if g.authorization_id is not None])
            at_provider = at_provider or retired
        return RevokeResponse(
            revoked=[CONNECTION_ID.format(c) for c in revoked],
            revoked_at_provider=at_provider,
            grants_revoked=[GRANT_ID.format(g) for g in ended],
        )

    async def revoke_by_id(self, connection_id: uuid.UUID, *, by: str = "operator") -> RevokeResponse | None:
        """One connection by id (operators, the user's own page): every authorization at the
        provider when it can, locally always. None when there is no such row; ``revoked`` is empty
        when it was already revoked."""
        async with self.read_sessions() as session:
            conn = await session.get(Connection, connection_id, populate_existing=True)
        if conn is None:
            return None
        if conn.status == REVOKED:
            return RevokeResponse(revoked=[], revoked_at_provider=False)
        revoked, at_provider = await self._disconnect([connection_id], conn.provider, reason=f"revoked_by_{by}")
        return RevokeResponse(revoked=[CONNECTION_ID.format(c) for c in revoked], revoked_at_provider=at_provider)

    async def _disconnect(
        self, connection_ids: list[uuid.UUID], provider_name: str, *, reason: str
    ) -> tuple[list[uuid.UUID], bool]:
        async with self.read_sessions() as session:
            auths = await authz.live_of_connections(session, connection_ids)
        at_provider = await self._revoke_at_provider(provider_name, auths)
        with _database_busy():
            async with unit_of_work(self.sessions) as session:
                revoked = await repo.mark_revoked(session, connection_ids, reason)
                await authz.revoke_of_connections(session, revoked, reason)
                told = await events_repo.connections_revoked(session, revoked)
        await self.announce(told)
        for cid in revoked:
            logger.info(
                "connection revoked", extra={"connection_id": CONNECTION_ID.format(cid), "provider": provider_name}
            )
        return revoked, at_provider

    async def _revoke_at_provider(self, provider_name: str, found: list[Authorization]) -> bool:
        """RFC 7009 calls for the tokens read before; no session is open while they run."""
        if not found:
            return False
        try:
            provider: ResolvedProvider | None = await self.provider(provider_name)
        except (UnknownProvider, UpstreamError):
            provider = None
        at_provider = False
        for auth in found:
            if provider is None:
                continue
            try:
                refresh_token = self._open(auth, REFRESH_TOKEN)
                access_token = self._open(auth, ACCESS_TOKEN)
            except ReauthorizationRequired:
                continue  # unreadable: nothing to hand back
            # Revoking the refresh token ends the whole grant (RFC 7009 §2.1); else the access token.
            if refresh_token is not None:
                done = await oauth.revoke(self.http, provider, refresh_token, REFRESH_TOKEN)
            elif access_token is not None:
                done = await oauth.revoke(self.http, provider, access_token, ACCESS_TOKEN)
            else:
                done = False
            at_provider = done or at_provider
        return at_provider


@contextlib.contextmanager
def _database_busy() -> Iterator[None]:
    """A database error that passes (a lock wait that ran out, a failover, a dropped connection)
    is answered 503 + ``Retry-After``; nothing was written, so the caller may simply retry. Any
    other database error is not caught here."""
    try:
        yield
    except DBAPIError as exc:
        kind = classify(exc)
        if kind not in TRANSIENT:
            raise
        logger.warning("database briefly unavailable", extra={"code": str(kind)})
        raise ServiceUnavailable(
            "The database is briefly unavailable; retry shortly.",
            headers={"Retry-After": str(DB_RETRY_AFTER_SECONDS)},
        ) from None
