"""Connections: finishing an authorization, handing out (and refreshing) tokens, revoking.

Refresh is the delicate part. Many replicas may be asked for the same near-expiry token at once,
and providers that rotate refresh tokens treat a second use of one as theft (RFC 9700 §4.14) and
revoke the whole grant. So a refresh happens only while holding the connection's row lock
(``SELECT … FOR UPDATE``): the first caller refreshes and commits, every other caller waits on
the lock, then sees a fresh token and returns it without calling the provider.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections import oauth
from service.connections import repository as repo
from service.connections.discovery import MetadataCache
from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, REVOKED, Connection, OAuthState
from service.connections.providers import ResolvedProvider, UnknownProvider, get_provider, resolve
from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.db.base import CONNECTION_ID
from service.errors import (
    Conflict,
    NotConnected,
    ReauthorizationRequired,
    ServiceUnavailable,
    UpstreamError,
)
from service.flows.kinds import check_issuer_trusted, check_provider_allowed
from service.identity.keys import AuthenticatedClient

logger = logging.getLogger("elicitd.connections")

ACCESS_TOKEN = "access_token"
REFRESH_TOKEN = "refresh_token"
PKCE_VERIFIER = "pkce_verifier"
REFRESH_MARGIN_SECONDS = 60.0
REFRESH_LOCK_TIMEOUT = "20s"


class InsufficientScope(Conflict):
    code = "insufficient_scope"
    title = "The connection lacks requested scopes"


class RefreshFailed(UpstreamError):
    code = "provider_refresh_failed"
    title = "The provider did not refresh the token"


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
    revoked: list[str]
    revoked_at_provider: bool


@dataclass(frozen=True, slots=True)
class Completed:
    connection: Connection
    result: dict[str, Any]


def connection_result(conn: Connection) -> dict[str, Any]:
    """What a completed flow tells the MCP server. Never the token: that is the token endpoint's job."""
    return {
        "connection_id": CONNECTION_ID.format(conn.id),
        "provider": conn.provider,
        "account_id": conn.account_id,
        "account_login": conn.account_login,
        "scopes": list(conn.scopes or []),
    }


def granted_scopes(tokens: oauth.TokenSet, requested: list[str], separator: str) -> list[str]:
    """RFC 6749 §5.1: ``scope`` is returned only when it differs from the request."""
    if tokens.scope is None:
        return sorted(set(requested))
    parts = tokens.scope.replace(separator, " ").split() if separator != " " else tokens.scope.split()
    return sorted(set(parts))


class ConnectionService:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        metadata: MetadataCache,
        refresh_margin_seconds: float = REFRESH_MARGIN_SECONDS,
        on_refresh: Callable[[str, str], None] | None = None,
    ) -> None:
        self.sessions = sessions
        self.vault = vault
        self.metadata = metadata
        self.margin = refresh_margin_seconds
        # ``(provider, outcome)`` after each refresh attempt (the metrics' refresh counter).
        self.on_refresh = on_refresh

    def _refreshed(self, provider: str, outcome: str) -> None:
        if self.on_refresh is not None:
            self.on_refresh(provider, outcome)

    # ---- providers -------------------------------------------------------------------------------
    async def provider(self, session: AsyncSession, name: str) -> ResolvedProvider:
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

    def _seal_tokens(self, connection_id: uuid.UUID, tokens: oauth.TokenSet) -> dict[str, Any]:
        owner = CONNECTION_ID.format(connection_id)
        access_kid, access = self.vault.encrypt(tokens.access_token, owner=owner, purpose=ACCESS_TOKEN)
        refresh_kid, refresh = (None, None)
        if tokens.refresh_token is not None:
            refresh_kid, refresh = self.vault.encrypt(tokens.refresh_token, owner=owner, purpose=REFRESH_TOKEN)
        return {
            "access_enc": access,
            "access_kid": access_kid,
            "refresh_enc": refresh,
            "refresh_kid": refresh_kid,
            "token_type": tokens.token_type,
            "expires_in": tokens.expires_in,
        }

    def _open(self, conn: Connection, purpose: str) -> str | None:
        owner = CONNECTION_ID.format(conn.id)
        try:
            if purpose == ACCESS_TOKEN and conn.access_token_enc is not None and conn.access_token_key_id:
                return self.vault.decrypt_text(
                    conn.access_token_key_id, conn.access_token_enc, owner=owner, purpose=purpose
                )
            if purpose == REFRESH_TOKEN and conn.refresh_token_enc is not None and conn.refresh_token_key_id:
                return self.vault.decrypt_text(
                    conn.refresh_token_key_id, conn.refresh_token_enc, owner=owner, purpose=purpose
                )
        except SealError as exc:
            # Its key left the ring, or the value was altered or moved: nothing usable is stored, and
            # the way out for the user is to connect again.
            logger.error("stored token cannot be decrypted", extra={"connection_id": owner})
            raise ReauthorizationRequired(
                "The stored credentials for this connection cannot be read; connect the account again.",
                extra={"connection_id": owner},
            ) from exc
        return None

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
    ) -> Completed:
        """Write the tokens into the caller's transaction (the flow's completion commits them)."""
        connection_id = (
            reconnect if reconnect is not None and await repo.reclaim(session, reconnect, account_id) else None
        )
        if connection_id is None:
            connection_id = await repo.claim_slot(
                session, iss=iss, sub=sub, provider=provider.name, account_id=account_id
            )
        values = self._seal_tokens(connection_id, tokens)
        values.update(
            account_id=account_id,
            account_login=account_login,
            scopes=granted_scopes(tokens, requested, provider.scope_separator),
        )
        conn = await repo.store_tokens(session, connection_id, values)
        return Completed(connection=conn, result=connection_result(conn))

    # ---- the token endpoint ----------------------------------------------------------------------
    async def _pick(
        self, client: AuthenticatedClient, provider: str, iss: str, sub: str, account: str | None
    ) -> Connection:
        check_provider_allowed(client, provider)
        check_issuer_trusted(client, iss)
        async with self.sessions() as session:
            found = await repo.live_connections(session, iss=iss, sub=sub, provider=provider, account=account)
        if not found:
            raise NotConnected(f"The subject has no connection to '{provider}'.")
        active = [c for c in found if c.status == ACTIVE]
        return active[0] if active else found[0]

    def _answer(self, conn: Connection) -> TokenResponse:
        token = self._open(conn, ACCESS_TOKEN)
        if token is None:
            raise ReauthorizationRequired(
                "The connection must be authorized again.", extra={"connection_id": CONNECTION_ID.format(conn.id)}
            )
        return TokenResponse(
            access_token=token,
            token_type=conn.token_type,
            connection_id=CONNECTION_ID.format(conn.id),
            provider=conn.provider,
            account_id=conn.account_id,
            account_login=conn.account_login,
            scopes=list(conn.scopes or []),
            expires_at=conn.expires_at,
        )

    def _reauth(self, conn: Connection) -> ReauthorizationRequired:
        return ReauthorizationRequired(
            "The provider no longer accepts this connection; create an oauth_connect flow to reconnect it.",
            extra={"connection_id": CONNECTION_ID.format(conn.id)},
        )

    async def token(
        self, client: AuthenticatedClient, provider: str, *, iss: str, sub: str, scopes: list[str], account: str | None
    ) -> TokenResponse:
        conn = await self._pick(client, provider, iss, sub, account)
        if conn.status == REAUTHORIZATION_REQUIRED:
            raise self._reauth(conn)
        missing = sorted(set(scopes) - set(conn.scopes or []))
        if missing:
            raise InsufficientScope(
                "The connection was not granted every requested scope; create an "
                "oauth_connect flow with them to ask the user.",
                extra={"missing": missing},
            )
        async with self.sessions() as session:
            fresh = (
                await session.execute(
                    text(
                        "SELECT CAST(:e AS timestamptz) IS NULL "
                        "OR CAST(:e AS timestamptz) > now() + make_interval(secs => :m)"
                    ),
                    {"e": conn.expires_at, "m": self.margin},
                )
            ).scalar_one()
        if fresh:
            return self._answer(conn)
        return await self._refresh(conn.id)

    async def refresh_by_id(self, connection_id: uuid.UUID) -> Connection | None:
        """Refresh now whatever the expiry (operators), through the same row-locked path as the
        token endpoint. Returns the updated row (never the token); None when there is no such row."""
        await self._refresh(connection_id, force=True)
        async with self.sessions() as session:
            return await session.get(Connection, connection_id, populate_existing=True)

    async def _refresh(self, connection_id: uuid.UUID, *, force: bool = False) -> TokenResponse:
        async with self.sessions() as session:
            await session.execute(text(f"SET LOCAL lock_timeout = '{REFRESH_LOCK_TIMEOUT}'"))
            try:
                locked = await repo.lock_for_refresh(session, connection_id, self.margin)
            except DBAPIError as exc:
                logger.warning(
                    "refresh lock wait timed out",
                    extra={"connection_id": str(connection_id), "error_type": type(exc).__name__},
                )
                raise ServiceUnavailable(
                    "Another refresh of this connection is taking long; retry shortly.", headers={"Retry-After": "2"}
                ) from None
            if locked is None:
                raise NotConnected("The connection no longer exists.")
            conn, due = locked
            if conn.status == REAUTHORIZATION_REQUIRED:
                raise self._reauth(conn)
            if conn.status != ACTIVE:
                raise NotConnected("The connection was revoked.")
            if not due and not force:
                return self._answer(conn)  # another caller refreshed while we waited for the lock
            refresh_token = self._open(conn, REFRESH_TOKEN)
            expired = (
                await session.execute(
                    text("SELECT COALESCE(CAST(:e AS timestamptz) <= now(), false)"), {"e": conn.expires_at}
                )
            ).scalar_one()
            if refresh_token is None:
                if force:
                    raise NoRefreshToken(
                        "The provider gave this connection no refresh token; it cannot be "
                        "refreshed, only reconnected when it expires."
                    )
                if not expired:
                    return self._answer(conn)
                await repo.mark_reauthorization_required(session, conn.id)
                await session.commit()
                raise self._reauth(conn)
            provider = await self.provider(session, conn.provider)
            try:
                tokens = await oauth.refresh(provider, refresh_token)
            except oauth.ProviderError as exc:
                if exc.error == "invalid_grant":
                    await repo.mark_reauthorization_required(session, conn.id)
                    await session.commit()
                    self._refreshed(conn.provider, "reauthorization_required")
                    logger.info(
                        "connection needs reauthorization",
                        extra={
                            "connection_id": CONNECTION_ID.format(conn.id),
                            "provider": conn.provider,
                            "code": "invalid_grant",
                        },
                    )
                    raise self._reauth(conn) from None
                logger.warning(
                    "token refresh failed",
                    extra={
                        "connection_id": CONNECTION_ID.format(conn.id),
                        "provider": conn.provider,
                        "code": exc.error,
                    },
                )
                self._refreshed(conn.provider, "failed")
                if not expired and not force:
                    return self._answer(conn)  # still valid for a moment: better than an error
                raise RefreshFailed(
                    "The provider failed to refresh the token; retry later.", extra={"provider_error": exc.error}
                ) from None
            values = self._seal_tokens(conn.id, tokens)
            values["scopes"] = sorted(set(tokens.scope.split())) if tokens.scope else None
            updated = await repo.store_refreshed(session, conn.id, values)
            await session.commit()
            self._refreshed(conn.provider, "refreshed")
            logger.info(
                "token refreshed", extra={"connection_id": CONNECTION_ID.format(conn.id), "provider": conn.provider}
            )
            return self._answer(updated)

    # ---- revocation ------------------------------------------------------------------------------
    async def revoke(
        self, client: AuthenticatedClient, provider_name: str, *, iss: str, sub: str, account: str | None
    ) -> RevokeResponse:
        await self._pick(client, provider_name, iss, sub, account)  # access checks and not_connected
        async with self.sessions() as session:
            found = await repo.live_connections(session, iss=iss, sub=sub, provider=provider_name, account=account)
            at_provider = await self._revoke_at_provider(session, provider_name, found)
            revoked = await repo.mark_revoked(session, [c.id for c in found])
            await session.commit()
        for cid in revoked:
            logger.info(
                "connection revoked", extra={"connection_id": CONNECTION_ID.format(cid), "provider": provider_name}
            )
        return RevokeResponse(revoked=[CONNECTION_ID.format(c) for c in revoked], revoked_at_provider=at_provider)

    async def revoke_by_id(self, connection_id: uuid.UUID) -> RevokeResponse | None:
        """One connection by id (operators): at the provider when it can, locally always. None when
        there is no such row; ``revoked`` is empty when it was already revoked."""
        async with self.sessions() as session:
            conn = await session.get(Connection, connection_id, populate_existing=True)
            if conn is None:
                return None
            found = [conn] if conn.status != REVOKED else []
            at_provider = await self._revoke_at_provider(session, conn.provider, found)
            revoked = await repo.mark_revoked(session, [c.id for c in found])
            await session.commit()
        for cid in revoked:
            logger.info(
                "connection revoked", extra={"connection_id": CONNECTION_ID.format(cid), "provider": conn.provider}
            )
        return RevokeResponse(revoked=[CONNECTION_ID.format(c) for c in revoked], revoked_at_provider=at_provider)

    async def _revoke_at_provider(self, session: AsyncSession, provider_name: str, found: list[Connection]) -> bool:
        if not found:
            return False
        try:
            provider: ResolvedProvider | None = await self.provider(session, provider_name)
        except (UnknownProvider, UpstreamError):
            provider = None
        at_provider = False
        for conn in found:
            if provider is None:
                continue
            refresh_token = self._open(conn, REFRESH_TOKEN)
            access_token = self._open(conn, ACCESS_TOKEN)
            # Revoking the refresh token ends the whole grant (RFC 7009 §2.1); else the access token.
            if refresh_token is not None:
                at_provider = await oauth.revoke(provider, refresh_token, REFRESH_TOKEN) or at_provider
            elif access_token is not None:
                at_provider = await oauth.revoke(provider, access_token, ACCESS_TOKEN) or at_provider
        return at_provider
