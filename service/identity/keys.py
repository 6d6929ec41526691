"""Server-client API keys: ``elk_<prefix>_<secret>``, stored as SHA-256 only.

The keys are 256-bit random, so a plain SHA-256 is enough (no password-style stretching): it is
the lookup key, and a database leak reveals nothing usable. Verified keys are cached briefly in
process (``ELICITD_API_KEY_CACHE_SECONDS``) to keep the hot path at one query; a revoked or
disabled key stops working on every replica within that many seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.errors import Unauthenticated
from service.identity.models import ServerClient, ServerClientKey

KEY_PREFIX = "elk_"


@dataclass(frozen=True, slots=True)
class AuthenticatedClient:
    """The server client a request acts for; everything the hot path needs, nothing secret."""

    id: uuid.UUID
    name: str
    display_name: str
    allowed_providers: tuple[str, ...]
    trusted_issuers: tuple[str, ...]
    flows_per_minute: int | None
    pending_per_subject: int | None
    # 'required': every call naming a subject carries that user's access token (subject_proof.py).
    subject_proof: str = "required"
    resource_uris: tuple[str, ...] = ()


def authenticated_client(row: ServerClient) -> AuthenticatedClient:
    """The client a request acts for, from its row: the key check, the diagnosis and a reconnect all
    judge with this one, so they never disagree on which providers and issuers it may use."""
    return AuthenticatedClient(
        id=row.id,
        name=row.name,
        display_name=row.display_name,
        allowed_providers=tuple(row.allowed_providers or ()),
        trusted_issuers=tuple(row.trusted_issuers or ()),
        flows_per_minute=row.flows_per_minute,
        pending_per_subject=row.pending_per_subject,
        subject_proof=row.subject_proof,
        resource_uris=tuple(row.resource_uris or ()),
    )


def new_api_key() -> tuple[str, bytes, str]:
    """Return ``(key shown once, hash to store, display prefix)``."""
    prefix = secrets.token_hex(4)
    key = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    return key, hash_key(key), prefix


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


async def add_key(session: AsyncSession, server_client_id: uuid.UUID) -> str:
    key, digest, prefix = new_api_key()
    session.add(ServerClientKey(server_client_id=server_client_id, key_hash=digest, prefix=prefix))
    await session.flush()
    return key


class ApiKeyAuthenticator:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], cache_seconds: float, *, clock: Clock | None = None
    ) -> None:
        self._sessions = sessions
        self._ttl = cache_seconds
        # Only the cache's freshness reads this clock; a key's own expiry is the database's call.
        self._clock: Clock = clock or SystemClock()
        self._cache: dict[bytes, tuple[float, AuthenticatedClient]] = {}
        self._inflight: dict[bytes, asyncio.Future[AuthenticatedClient]] = {}

    async def authenticate(self, authorization: str | None) -> AuthenticatedClient:
        # One message for every failure: a caller cannot tell a wrong key from a revoked one.
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthenticated()
        key = authorization[len("Bearer ") :].strip()
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            raise Unauthenticated()
        digest = hash_key(key)
        now = self._clock.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        if self._ttl <= 0:
            return await self._lookup(digest)
        # One lookup per key at a time: when the entry expires under load, every request in flight
        # would otherwise miss together and each run the same query (hundreds, during a burst of
        # long-polls). They share one lookup task; a caller that goes away does not cancel it.
        task = self._inflight.get(digest)
        if task is None:
            task = asyncio.ensure_future(self._lookup(digest))
            self._inflight[digest] = task
            task.add_done_callback(lambda done: self._lookup_done(digest, done))
        return await asyncio.shield(task)

    def _lookup_done(self, digest: bytes, task: asyncio.Future[AuthenticatedClient]) -> None:
        self._inflight.pop(digest, None)
        if not task.cancelled():
            task.exception()  # mark it retrieved; each waiting request re-raises it itself

    async def _lookup(self, digest: bytes) -> AuthenticatedClient:
        async with self._sessions() as session:
            row = (
                (
                    await session.execute(
                        select(ServerClient)
                        .join(ServerClientKey, ServerClientKey.server_client_id == ServerClient.id)
                        .where(
                            ServerClientKey.key_hash == digest,
                            ServerClientKey.revoked_at.is_(None),
                            (ServerClientKey.expires_at.is_(None)) | (ServerClientKey.expires_at > text("now()")),
                            ServerClient.disabled.is_(False),
                        )
                    )
                )
                .scalars()
                .first()
            )
        if row is None:
            self._cache.pop(digest, None)
            raise Unauthenticated()
        client = authenticated_client(row)
        if self._ttl > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (self._clock.monotonic() + self._ttl, client)
        return client

    def forget(self) -> None:
        self._cache.clear()
