"""The signed-in operator (``Operator``) and the console's own sessions.

A console session is not an end user's browser session: its own table (``operator_sessions``),
its own cookie (``elicitd_console``, ``__Host-`` under TLS, ``HttpOnly``, ``SameSite=Strict``, so
no other site's page can make the browser send it), a role fixed at sign-in from the issuer's
claim (``service.operators.roles``), an idle timeout and an absolute lifetime. The cookie holds a
256-bit random value; the table holds its SHA-256, so a database read gives no working cookie.

Touching a session is the one validity check, one conditional statement: not expired, seen within
the idle time, its issuer still enabled and still the one marked for operator sign-in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from litestar.datastructures import Cookie
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.tokens import Role
from service.identity.sessions import digest, new_token
from service.settings import Settings
from service.signin.gate import make_cookie

SESSION_COOKIE = "elicitd_console"
# The pre-sign-in cookie binding a login attempt to this browser. ``Lax``, unlike the session's: it
# must come back on the issuer's redirect to the callback, a cross-site navigation.
LOGIN_COOKIE = "elicitd_console_login"


@dataclass(frozen=True, slots=True)
class Operator:
    """The person signed in to the console: who (issuer and subject), their name and role, and when
    the issuer last saw them authenticate (``auth_time``; None when it did not say)."""

    issuer: str
    subject: str
    display_name: str
    role: Role
    authenticated_at: datetime | None
    session_id: bytes = field(repr=False)
    csrf_token: str = field(repr=False)

    def can(self, role: Role) -> bool:
        return self.role >= role

    def fresh(self, now: datetime, seconds: int) -> bool:
        """Whether the last authentication is at most ``seconds`` old (the max_age check)."""
        return self.authenticated_at is not None and (now - self.authenticated_at).total_seconds() <= seconds

    @property
    def who(self) -> dict[str, str]:
        """How an audit row names this operator: issuer and subject, nothing secret."""
        return {"iss": self.issuer, "sub": self.subject}


def session_cookie(settings: Settings, value: str, max_age: int) -> Cookie:
    return make_cookie(settings, SESSION_COOKIE, value, max_age, samesite="strict")


def login_cookie(settings: Settings, value: str, max_age: int) -> Cookie:
    return make_cookie(settings, LOGIN_COOKIE, value, max_age)


def csrf_token_for(session_id: bytes, secret: bytes) -> str:
    """A synchronizer token: the HMAC of the session id under the session's own secret."""
    mac = hmac.new(secret, b"elicitd-console-csrf\x00" + session_id, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


async def create_session(
    session: AsyncSession,
    *,
    issuer_id: uuid.UUID,
    iss: str,
    sub: str,
    display_name: str,
    role: Role,
    authenticated_at: datetime | None,
    lifetime: int,
) -> str:
    """Insert a console session; returns the cookie value (the only place it exists in clear)."""
    token = new_token()
    await session.execute(
        text("""
        INSERT INTO operator_sessions (id, issuer_id, iss, sub, display_name, role, csrf_secret, authenticated_at,
                                       expires_at)
        VALUES (:id, :issuer_id, :iss, :sub, :name, :role, :csrf, :auth_at, now() + make_interval(secs => :life))
        """),
        {
            "id": digest(token),
            "issuer_id": issuer_id,
            "iss": iss,
            "sub": sub,
            "name": display_name,
            "role": int(role),
            "csrf": secrets.token_bytes(32),
            "auth_at": authenticated_at,
            "life": lifetime,
        },
    )
    return token


async def touch_session(session: AsyncSession, token: str, *, idle_seconds: int) -> Operator | None:
    """The live operator of this cookie value, marked seen now; None when it expired, sat idle too
    long, was signed out, or its issuer was disabled or is no longer the one marked."""
    row = (
        await session.execute(
            text("""
        UPDATE operator_sessions s SET last_seen_at = now()
        FROM issuers i, operator_signin o
        WHERE s.id = :id AND s.expires_at > now() AND s.last_seen_at > now() - make_interval(secs => :idle)
          AND i.id = s.issuer_id AND i.enabled AND o.issuer_id = s.issuer_id
        RETURNING s.id, s.iss, s.sub, s.display_name, s.role, s.csrf_secret, s.authenticated_at
        """),
            {"id": digest(token), "idle": idle_seconds},
        )
    ).first()
    if row is None:
        return None
    return Operator(
        issuer=row.iss,
        subject=row.sub,
        display_name=row.display_name,
        role=Role(row.role),
        authenticated_at=row.authenticated_at,
        session_id=row.id,
        csrf_token=csrf_token_for(row.id, row.csrf_secret),
    )


async def delete_session(session: AsyncSession, token: str) -> bool:
    result = await session.execute(
        text("DELETE FROM operator_sessions WHERE id = :id RETURNING id"), {"id": digest(token)}
    )
    return result.first() is not None


async def purge_expired(session: AsyncSession, *, batch: int = 500, idle_seconds: int = 24 * 3600) -> int:
    """Drop a batch of ended sessions (past their lifetime, or idle a day); sign-ins call it."""
    result = await session.execute(
        text(
            "DELETE FROM operator_sessions WHERE id IN (SELECT id FROM operator_sessions "
            "WHERE expires_at < now() OR last_seen_at < now() - make_interval(secs => :idle) "
            "LIMIT :n FOR UPDATE SKIP LOCKED)"
        ),
        {"n": batch, "idle": idle_seconds},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
