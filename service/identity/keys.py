"""Server-client API keys: ``elk_<prefix>_<secret>``, stored as SHA-256 only.

The keys are 256-bit random, so a plain SHA-256 is enough (no password-style stretching): it is
the lookup key, and a database leak reveals nothing usable. Verified keys are cached briefly in
process (``ELICITD_API_KEY_CACHE_SECONDS``) to keep the hot path at one query; a revoked or
disabled key stops working on every replica within that many seconds.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

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
    def __init__(self, sessions: async_sessionmaker[AsyncSession], cache_seconds: float) -> None:
        self._sessions = sessions
        self._ttl = cache_seconds
        self._cache: dict[bytes, tuple[float, AuthenticatedClient]] = {}

    async def authenticate(self, authorization: str | None) -> AuthenticatedClient:
        # One message for every failure: a caller cannot tell a wrong key from a revoked one.
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthenticated()
        key = authorization[len("Bearer ") :].strip()
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            raise Unauthenticated()
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self._sessions() as session:
            row = (
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
            ).scalars().first()
        if row is None:
            self._cache.pop(digest, None)
            raise Unauthenticated()
        client = AuthenticatedClient(
            id=row.id,
            name=row.name,
            display_name=row.display_name,
            allowed_providers=tuple(row.allowed_providers or ()),
            trusted_issuers=tuple(row.trusted_issuers or ()),
            flows_per_minute=row.flows_per_minute,
            pending_per_subject=row.pending_per_subject,
        )
        if self._ttl > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now + self._ttl, client)
        return client

    def forget(self) -> None:
        self._cache.clear()
