"""Revoking: at the provider first (RFC 7009), with no session open, then here, conditionally.

A connection revoked for everyone (its connecting server or an operator asked) loses every
authorization; a server only granted an account ends its own grant, and the authorization it
pointed at goes once no live grant points at it (``retire``). Provider calls use tokens read
before, in a session already let go; the local writes are single conditional statements that
also append the stream events, and those servers are woken after the commit.
"""

from __future__ import annotations

import logging
import uuid

from service.connections import authorizations as authz
from service.connections import oauth
from service.connections import repository as repo
from service.connections.errors import database_busy
from service.connections.models import Authorization
from service.connections.parts import ConnectionParts
from service.connections.per_connection import for_authorization
from service.connections.providers import ResolvedProvider, UnknownProvider
from service.connections.sealing import ACCESS_TOKEN, REFRESH_TOKEN
from service.db.base import CONNECTION_ID
from service.db.unit import unit_of_work
from service.errors import ReauthorizationRequired, UpstreamError
from service.events import repository as events_repo
from service.grants import repository as grant_repo

logger = logging.getLogger("elicitd.connections")


class Revocations:
    def __init__(
        self,
        parts: ConnectionParts,
    ) -> None:
        self.parts = parts

    async def end_grants(self, grants: list[grant_repo.ClientGrant]) -> tuple[list[uuid.UUID], bool]:
        """A grantee's own grants ended (by itself), then the authorizations they pointed at
        retired when nobody else holds them. The grants ended and whether the provider accepted a
        revocation."""
        ended: list[uuid.UUID] = []
        with database_busy():
            async with unit_of_work(self.parts.sessions) as session:
                for grant in grants:
                    if await grant_repo.revoke(session, grant.grant_id, by="grantee"):
                        ended.append(grant.grant_id)
                told = await events_repo.grants_revoked(session, ended)
        await self.parts.announce(told)
        retired = await self.retire([g.authorization_id for g in grants if g.authorization_id is not None])
        return ended, retired

    async def retire(self, authorization_ids: list[uuid.UUID]) -> bool:
        """Authorizations no live grant points at any more (a grantee moved to a new one, or its
        grant was revoked): revoked at the provider (RFC 7009), then here. After the commit that
        replaced them, with no session open during the provider calls. Whether the provider
        accepted a revocation."""
        if not authorization_ids:
            return False
        async with self.parts.read_sessions() as session:
            idle = await authz.unreferenced(session, authorization_ids)
        if not idle:
            return False
        at_provider = await self._at_provider(idle[0].provider, idle)
        async with unit_of_work(self.parts.sessions) as session:
            retired = await authz.mark_revoked(session, [a.id for a in idle])
            for connection_id in {a.connection_id for a in idle}:
                await authz.sync_connection(session, connection_id)
        for auth in idle:
            logger.info(
                "authorization retired",
                extra={"connection_id": CONNECTION_ID.format(auth.connection_id), "provider": auth.provider},
            )
        return at_provider and bool(retired)

    async def disconnect(
        self, connection_ids: list[uuid.UUID], provider_name: str, *, reason: str
    ) -> tuple[list[uuid.UUID], bool]:
        """Revoke these connections for everyone: each live authorization at the provider when it
        can (RFC 7009, with no session open), then every row here, wiped, with its events. The
        ids revoked (not those already revoked) and whether the provider accepted one."""
        async with self.parts.read_sessions() as session:
            auths = await authz.live_of_connections(session, connection_ids)
        at_provider = await self._at_provider(provider_name, auths)
        with database_busy():
            async with unit_of_work(self.parts.sessions) as session:
                revoked = await repo.mark_revoked(session, connection_ids, reason)
                await authz.revoke_of_connections(session, revoked, reason)
                told = await events_repo.connections_revoked(session, revoked)
        await self.parts.announce(told)
        for cid in revoked:
            logger.info(
                "connection revoked", extra={"connection_id": CONNECTION_ID.format(cid), "provider": provider_name}
            )
        return revoked, at_provider

    async def _at_provider(self, provider_name: str, found: list[Authorization]) -> bool:
        """RFC 7009 calls for the tokens read before; no session is open while they run."""
        if not found:
            return False
        try:
            provider: ResolvedProvider | None = await self.parts.provider(provider_name)
        except (UnknownProvider, UpstreamError):
            provider = None
        at_provider = False
        for auth in found:
            if provider is None:
                continue
            try:
                refresh_token = self.parts.seal.refresh_token(auth)
                access_token = self.parts.seal.access_token(auth)
            except ReauthorizationRequired:
                continue  # unreadable: nothing to hand back
            # The same shop (connection parameters) and token server as the code exchange.
            talk_to = for_authorization(provider, auth.parameters, auth.metadata_)
            # Revoking the refresh token ends the whole grant (RFC 7009 §2.1); else the access token.
            if refresh_token is not None:
                done = await oauth.revoke(self.parts.http, talk_to, refresh_token, REFRESH_TOKEN)
            elif access_token is not None:
                done = await oauth.revoke(self.parts.http, talk_to, access_token, ACCESS_TOKEN)
            else:
                done = False
            at_provider = done or at_provider
        return at_provider
