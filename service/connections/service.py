"""Connections: finishing an authorization, handing out tokens, revoking.

Handing out a token reads it through the asking server client's grant, in one statement on the
driver (``service.connections.tokens``); a token about to expire is refreshed first, once per
process and once across replicas (``service.connections.refresh``). Revocation and provider
discovery follow the shape every outside call here does: read what is needed and let the session
go, call out, then write conditionally. The timeouts involved are chosen against each other; the
rule is in ``service/db/engine.py`` ("Timeouts").
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.connections import authorizations as authz
from service.connections import oauth
from service.connections import repository as repo
from service.connections.discovery import MetadataCache
from service.connections.errors import (
    AccountMismatch,
    AuthorizationExceedsGrant,
    InsufficientScope,
    database_busy,
    reconnect_required,
)
from service.connections.models import ACTIVE, REVOKED, Authorization, Connection, OAuthState
from service.connections.parts import ConnectionParts
from service.connections.providers import ResolvedProvider, UnknownProvider, get_provider, resolve
from service.connections.refresh import Refreshes
from service.connections.revocation import Revocations
from service.connections.schemas import RevokeResponse, TokenResponse, connection_result
from service.connections.sealing import TokenSeal, binding
from service.connections.tokens import TokenRow, TokenStatements
from service.crypto.vault import Vault
from service.db.base import CONNECTION_ID, uuid7
from service.db.direct import DirectStatements
from service.db.errors import TRANSIENT, classify
from service.errors import NotConnected
from service.flows.kinds import check_issuer_trusted, check_provider_allowed
from service.grants import integrity
from service.grants import repository as grant_repo
from service.grants.models import GRANT_ID
from service.identity.keys import AuthenticatedClient

logger = logging.getLogger("elicitd.connections")

REFRESH_MARGIN_SECONDS = 60.0
# A connection is ``expiring`` when, without a person, it stops working within this long (its
# refresh token's own end): a week leaves time to read an email and reconnect.
EXPIRING_SECONDS = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Completed:
    connection: Connection
    authorization: Authorization
    result: dict[str, Any]
    # Server clients told the connection recovered (a reconnect in place): wake them after the commit.
    told: list[uuid.UUID] = dataclasses.field(default_factory=list)


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
        refreshed_events: bool = False,
        on_events: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.read_sessions = read_sessions
        # The token endpoint's statements on the driver, no ORM instances.
        self.tokens = TokenStatements(direct)
        self.vault = vault
        self.seal = TokenSeal(vault)
        self.metadata = metadata
        self.http = http
        self.clock = clock or SystemClock()
        self.margin = refresh_margin_seconds
        self.expiring_seconds = expiring_seconds
        # After a commit that appended stream events: wake those server clients' streams.
        self.on_events = on_events
        parts = ConnectionParts(
            sessions=sessions,
            read_sessions=read_sessions,
            seal=self.seal,
            http=http,
            provider=self.provider,
            announce=self.announce,
        )
        self.revocations = Revocations(parts)
        self.refreshes = Refreshes(
            parts,
            clock=self.clock,
            margin_seconds=refresh_margin_seconds,
            expiring_seconds=expiring_seconds,
            on_refresh=on_refresh,
            refreshed_events=refreshed_events,
        )

    async def announce(self, server_client_ids: list[uuid.UUID]) -> None:
        """Wake these server clients' event streams (after the commit that appended their events)."""
        if server_client_ids and self.on_events is not None:
            await self.on_events(server_client_ids)

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
        return self.seal.seal_verifier(state_id, verifier)

    def open_verifier(self, state: OAuthState) -> str:
        return self.seal.open_verifier(state)

    def open_access_token(self, auth: Authorization) -> str | None:
        """The authorization's access token, for a call elicitd makes itself (a health probe)."""
        return self.seal.access_token(auth)

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
            if not await repo.reclaim(session, reconnect, account_id, account_login, provider.parameters):
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
                parameters=provider.parameters,
            )
        bound = binding(iss, sub, provider.name, account_id)
        scopes = granted_scopes(tokens, requested, provider.scope_separator)
        stored: Authorization | None = None
        told: list[uuid.UUID] = []
        if in_place is not None:
            sealed = self.seal.seal_tokens(in_place, bound, tokens)
            stored, moved = await authz.replace_tokens(
                session, in_place, connection_id, sealed, scopes=scopes, expiring_seconds=self.expiring_seconds
            )
            told = moved.told
        if stored is None:
            # A connection's first authorization takes the connection's id (as migration 0012 gave
            # the existing ones): one id to follow in logs for the common one-server account. Known
            # before sealing, since it is the tokens' owner; stable under the connection's row lock.
            new_id = uuid7() if await authz.exists(session, connection_id) else connection_id
            sealed = self.seal.seal_tokens(new_id, bound, tokens)
            stored = await authz.insert(session, new_id, connection_id, sealed, scopes=scopes)
        await authz.sync_connection(session, connection_id)
        conn = await session.get(Connection, connection_id, populate_existing=True)
        assert conn is not None  # row-locked by reclaim/claim_slot in this transaction
        result = connection_result(conn, scopes=stored.scopes)
        return Completed(connection=conn, authorization=stored, result=result, told=told)

    # ---- the token endpoint ----------------------------------------------------------------------
    async def _live(
        self, client: AuthenticatedClient, provider: str, iss: str, sub: str, account: str | None
    ) -> list[tuple[Connection, grant_repo.ClientGrant]]:
        """The subject's live connections to ``provider`` that ``client`` holds a grant on, each with
        that grant, after the access checks; ``not_connected`` when there is none."""
        check_provider_allowed(client, provider)
        check_issuer_trusted(client, iss)
        with database_busy():
            async with self.read_sessions() as session:
                found = await repo.live_connections(session, iss=iss, sub=sub, provider=provider, account=account)
                # Only connections this client was granted: any other is answered as absent.
                granted = await grant_repo.client_grants(session, client.id, [conn.id for conn in found])
        live = [(conn, granted[conn.id]) for conn in found if conn.id in granted]
        if not live:
            raise NotConnected(f"The subject has no connection to '{provider}'.")
        return live

    async def _live_tokens(
        self,
        client: AuthenticatedClient,
        provider: str,
        iss: str,
        sub: str,
        account: str | None,
        *,
        enabled_provider: bool = False,
    ) -> list[tuple[TokenRow, bool]]:
        """The client's grants on the subject's connections to ``provider``, each with its
        authorization, read as one statement on the driver (``service.db.direct``). Rows whose MAC
        does not check (written by someone without the keys) are dropped, and logged."""
        check_provider_allowed(client, provider)
        check_issuer_trusted(client, iss)
        with database_busy():
            rows = await self.tokens.for_client(
                iss=iss,
                sub=sub,
                provider=provider,
                account=account,
                margin_seconds=self.margin,
                client_id=client.id,
                enabled_provider=enabled_provider,
            )
        found = []
        for row, due in rows:
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

    async def token(
        self,
        client: AuthenticatedClient,
        provider: str,
        *,
        iss: str,
        sub: str,
        scopes: list[str],
        account: str | None,
        enabled_provider: bool = False,
    ) -> TokenResponse:
        """The token of the authorization the client's grant points at — never another one — and
        only when it holds every scope asked and nothing the grant does not. With
        ``enabled_provider`` (the token exchange), a provider that is not configured and enabled
        has no connection to give (``NotConnected``)."""
        found = await self._live_tokens(client, provider, iss, sub, account, enabled_provider=enabled_provider)
        active = [item for item in found if item[0].status == ACTIVE]
        if not active:
            raise reconnect_required(found[0][0].connection_id)
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
            return self.seal.answer(row, row.account_login)
        return await self.refreshes.join(row.id)

    async def _touch_grant(self, row: TokenRow) -> None:
        """Note the grant's last use (at most once a minute per grant, ``service.grants``). Only
        informative, so a database hiccup here costs the note, not the answer."""
        try:
            await self.tokens.touch(row.grant_id)
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
            raise reconnect_required(connection_id)
        for auth in active:
            await self.refreshes.join(auth.id, force=True)
        async with self.read_sessions() as session:
            return await session.get(Connection, connection_id, populate_existing=True)

    # ---- refresh (``service.connections.refresh``) --------------------------------------------------
    async def refresh_claimed(self, auth: Authorization, claim: uuid.UUID, provider: ResolvedProvider) -> str:
        """The proactive pass's refresh of an authorization it claimed: ``Refreshes.refresh_claimed``."""
        return await self.refreshes.refresh_claimed(auth, claim, provider)

    async def release(self, authorization_id: uuid.UUID, claim: uuid.UUID) -> None:
        await self.refreshes.release(authorization_id, claim)

    async def aclose(self) -> None:
        """Stop the refreshes in flight (on shutdown), each giving its claim up."""
        await self.refreshes.aclose()

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
            answer = await self.revocations.disconnect([c.id for c in owned], provider_name, reason=authz.DISCONNECTED)
            revoked, at_provider = answer
        ended: list[uuid.UUID] = []
        if granted:
            ended, retired = await self.revocations.end_grants([grant for _, grant in granted])
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
        revoked, at_provider = await self.revocations.disconnect(
            [connection_id], conn.provider, reason=f"revoked_by_{by}"
        )
        return RevokeResponse(revoked=[CONNECTION_ID.format(c) for c in revoked], revoked_at_provider=at_provider)

    async def retire(self, authorization_ids: list[uuid.UUID]) -> bool:
        """Authorizations no live grant points at any more: ``Revocations.retire``."""
        return await self.revocations.retire(authorization_ids)
