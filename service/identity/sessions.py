"""Server-side state of browser logins: login attempts (one per OIDC redirect) and sessions.

Neither table holds a value that works by itself if the database leaks: attempt and session ids
are SHA-256 digests of the ``state`` parameter and of the session cookie, and an attempt's PKCE
verifier and nonce are vault values bound to the attempt. Each change is one conditional
statement: consuming an attempt (``used_at IS NULL`` and not expired and the same browser) is the
single-use guarantee; touching a session (not expired, issuer still enabled) is the validity check.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.settings import Settings

LOGIN_STATE_SECONDS = 600
ATTEMPT_PURPOSE = "login_attempt"
SESSION_COOKIE = "elicitd_session"
LOGIN_COOKIE = "elicitd_login"
_HOST_PREFIX = "__Host-"


def cookie_name(settings: Settings, base: str) -> str:
    """``__Host-`` pins the cookie to this exact origin (Secure, Path=/, no Domain) under TLS."""
    return _HOST_PREFIX + base if settings.secure_cookies else base


def digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class ConsumedAttempt:
    issuer_id: uuid.UUID
    return_to: str
    code_verifier: str = field(repr=False)
    nonce: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: bytes
    issuer_id: uuid.UUID
    iss: str
    sub: str
    csrf_secret: bytes = field(repr=False)


async def create_login_attempt(
    session: AsyncSession,
    vault: Vault,
    *,
    state: str,
    browser_binding: str,
    issuer_id: uuid.UUID,
    code_verifier: str,
    nonce: str,
    return_to: str,
    lifetime: int = LOGIN_STATE_SECONDS,
) -> None:
    attempt_id = digest(state)
    # The state itself is sealed too, so the same browser coming back may be sent on with the same
    # attempt (``reusable_login_attempt``); the row's id stays its digest.
    key_id, blob = vault.encrypt(
        json.dumps({"v": code_verifier, "n": nonce, "s": state}), owner=attempt_id.hex(), purpose=ATTEMPT_PURPOSE
    )
    await session.execute(
        text("""
        INSERT INTO login_attempts (id, issuer_id, browser_binding, secrets_enc, secrets_key_id, return_to,
                                    expires_at)
        VALUES (:id, :issuer_id, :binding, :blob, :kid, :return_to, now() + make_interval(secs => :life))
        """),
        {
            "id": attempt_id,
            "issuer_id": issuer_id,
            "binding": digest(browser_binding),
            "blob": blob,
            "kid": key_id,
            "return_to": return_to,
            "life": lifetime,
        },
    )


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    state: str = field(repr=False)
    code_verifier: str = field(repr=False)
    nonce: str = field(repr=False)


async def reusable_login_attempt(
    session: AsyncSession,
    vault: Vault,
    *,
    browser_binding: str,
    issuer_id: uuid.UUID,
    return_to: str,
    min_remaining: int = 120,
) -> OpenAttempt | None:
    """This browser's unused attempt for the same issuer and page, with at least ``min_remaining``
    seconds left: a browser that reloads the page, or opens it in another tab, is sent to the
    issuer with the attempt it already has instead of writing a new row per visit."""
    row = (
        await session.execute(
            text("""
        SELECT id, secrets_enc, secrets_key_id FROM login_attempts
        WHERE browser_binding = :binding AND issuer_id = :issuer AND return_to = :return_to
          AND used_at IS NULL AND expires_at > now() + make_interval(secs => :min)
        ORDER BY expires_at DESC LIMIT 1
        """),
            {"binding": digest(browser_binding), "issuer": issuer_id, "return_to": return_to, "min": min_remaining},
        )
    ).first()
    if row is None:
        return None
    try:
        values = json.loads(
            vault.decrypt_text(row.secrets_key_id, row.secrets_enc, owner=row.id.hex(), purpose=ATTEMPT_PURPOSE)
        )
        return OpenAttempt(state=values["s"], code_verifier=values["v"], nonce=values["n"])
    except (SealError, ValueError, KeyError):
        return None  # sealed under a key that left the ring, or written before states were kept


async def consume_login_attempt(
    session: AsyncSession, vault: Vault, *, state: str, browser_binding: str
) -> ConsumedAttempt | None:
    """Use up the attempt named by ``state`` — only once, only before expiry, only from the browser
    that started it. None for anything else (unknown, replayed, expired, another browser): the
    caller must not learn which, and neither may an attacker probing states."""
    row = (
        await session.execute(
            text("""
        UPDATE login_attempts SET used_at = now()
        WHERE id = :id AND browser_binding = :binding AND used_at IS NULL AND expires_at > now()
        RETURNING issuer_id, return_to, secrets_enc, secrets_key_id
        """),
            {"id": digest(state), "binding": digest(browser_binding)},
        )
    ).first()
    if row is None:
        return None
    try:
        values = json.loads(
            vault.decrypt_text(row.secrets_key_id, row.secrets_enc, owner=digest(state).hex(), purpose=ATTEMPT_PURPOSE)
        )
    except (SealError, ValueError):
        return None
    return ConsumedAttempt(
        issuer_id=row.issuer_id, return_to=row.return_to, code_verifier=values["v"], nonce=values["n"]
    )


async def create_browser_session(
    session: AsyncSession, *, issuer_id: uuid.UUID, iss: str, sub: str, lifetime: int
) -> str:
    """Insert a session and return the cookie value (the only place it ever exists in clear)."""
    token = new_token()
    await session.execute(
        text("""
        INSERT INTO browser_sessions (id, issuer_id, iss, sub, csrf_secret, expires_at)
        VALUES (:id, :issuer_id, :iss, :sub, :csrf, now() + make_interval(secs => :life))
        """),
        {
            "id": digest(token),
            "issuer_id": issuer_id,
            "iss": iss,
            "sub": sub,
            "csrf": secrets.token_bytes(32),
            "life": lifetime,
        },
    )
    return token


async def touch_session(session: AsyncSession, token: str) -> SessionRow | None:
    """The live session for this cookie value, marking it seen; None when expired, logged out, or
    its issuer was disabled (disabling an issuer ends its sessions at once)."""
    row = (
        await session.execute(
            text("""
        UPDATE browser_sessions bs SET last_seen_at = now()
        FROM issuers i
        WHERE bs.id = :id AND bs.expires_at > now() AND i.id = bs.issuer_id AND i.enabled
        RETURNING bs.id, bs.issuer_id, bs.iss, bs.sub, bs.csrf_secret
        """),
            {"id": digest(token)},
        )
    ).first()
    if row is None:
        return None
    return SessionRow(id=row.id, issuer_id=row.issuer_id, iss=row.iss, sub=row.sub, csrf_secret=row.csrf_secret)


async def delete_session(session: AsyncSession, token: str) -> bool:
    result = await session.execute(
        text("DELETE FROM browser_sessions WHERE id = :id RETURNING id"), {"id": digest(token)}
    )
    return result.first() is not None


async def end_all_for_issuer(session: AsyncSession, issuer_id: uuid.UUID) -> None:
    """Disabling an issuer ends its sign-ins for good: its sessions and unfinished login attempts
    are deleted, not hidden, so enabling it again brings none of them back."""
    await session.execute(text("DELETE FROM browser_sessions WHERE issuer_id = :id"), {"id": issuer_id})
    await session.execute(text("DELETE FROM login_attempts WHERE issuer_id = :id"), {"id": issuer_id})


async def purge_expired(session: AsyncSession, *, batch: int = 500) -> int:
    """Drop a batch of dead attempts and sessions; cheap (indexed), so logins can call it."""
    attempts = await session.execute(
        text(
            "DELETE FROM login_attempts WHERE id IN (SELECT id FROM login_attempts "
            "WHERE expires_at < now() - interval '1 hour' LIMIT :n FOR UPDATE SKIP LOCKED)"
        ),
        {"n": batch},
    )
    sessions = await session.execute(
        text(
            "DELETE FROM browser_sessions WHERE id IN (SELECT id FROM browser_sessions "
            "WHERE expires_at < now() LIMIT :n FOR UPDATE SKIP LOCKED)"
        ),
        {"n": batch},
    )
    return int(attempts.rowcount or 0) + int(sessions.rowcount or 0)  # type: ignore[attr-defined]
