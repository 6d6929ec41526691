"""Admin tokens: ``eat_<prefix>_<secret>``, stored as SHA-256 only, with a role and an expiry.

Roles are ordered: ``viewer`` reads; ``operator`` also cancels/expires flows, revokes and refreshes
connections and replays webhooks; ``admin`` may do everything, including server clients, keys,
providers, issuers and tokens. Like API keys, tokens are 256-bit random, so plain SHA-256 is the
right hash (it is a lookup key; nothing to stretch).
"""

from __future__ import annotations

import enum
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.models import AdminToken
from service.db.base import PrefixedId
from service.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated

TOKEN_PREFIX = "eat_"
ADMIN_TOKEN_ID = PrefixedId("at")
MAX_LIFETIME = timedelta(days=366)


class Role(enum.IntEnum):
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls[value.upper()]
        except KeyError:
            raise InvalidRequest("role must be one of viewer, operator, admin.") from None


@dataclass(frozen=True, slots=True)
class AdminPrincipal:
    """Who an admin call acts as: the token's id and role, never the token."""

    token_id: uuid.UUID
    name: str
    role: Role

    def require(self, needed: Role) -> None:
        if self.role < needed:
            raise Forbidden(f"This operation needs the '{needed.label}' role.")


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_lifetime(raw: str) -> timedelta:
    """``90d``, ``12h``, ``30m`` or plain seconds; at most a year, so every token ends."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    raw = raw.strip().lower()
    try:
        seconds = int(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else int(raw)
    except ValueError:
        raise InvalidRequest("A lifetime looks like 90d, 12h, 30m or a number of seconds.") from None
    if seconds <= 0 or seconds > MAX_LIFETIME.total_seconds():
        raise InvalidRequest("A token lifetime is between one second and 366 days.")
    return timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class CreatedToken:
    token: AdminToken
    secret: str


async def create_token(session: AsyncSession, *, name: str, role: Role, lifetime: timedelta) -> CreatedToken:
    if not name or len(name) > 64:
        raise InvalidRequest("A token name is 1-64 characters.")
    prefix = secrets.token_hex(4)
    secret = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    row = AdminToken(
        name=name,
        role=role.label,
        token_hash=hash_token(secret),
        prefix=prefix,
        expires_at=(await _db_now(session)) + lifetime,
    )
    session.add(row)
    await session.flush()
    return CreatedToken(token=row, secret=secret)


async def list_tokens(session: AsyncSession) -> list[AdminToken]:
    return list((await session.execute(select(AdminToken).order_by(AdminToken.id))).scalars())


async def revoke_token(session: AsyncSession, token_ref: str) -> AdminToken:
    token_id = ADMIN_TOKEN_ID.parse(token_ref)
    row = None
    if token_id is not None:
        row = (
            (
                await session.execute(
                    update(AdminToken)
                    .where(AdminToken.id == token_id)
                    .values(revoked_at=text("COALESCE(revoked_at, now())"))
                    .returning(AdminToken)
                    .execution_options(populate_existing=True)
                )
            )
            .scalars()
            .first()
        )
    if row is None:
        raise NotFound("No admin token with this id.")
    return row


async def authenticate(session: AsyncSession, authorization: str | None) -> AdminPrincipal:
    """One answer for every failure (missing, malformed, unknown, revoked, expired)."""
    failure = Unauthenticated("A valid admin token is required.")
    if not authorization or not authorization.startswith("Bearer "):
        raise failure
    secret = authorization[len("Bearer ") :].strip()
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        raise failure
    # One statement finds a live token and stamps its use.
    row = (
        await session.execute(
            update(AdminToken)
            .where(
                AdminToken.token_hash == hash_token(secret),
                AdminToken.revoked_at.is_(None),
                AdminToken.expires_at > text("now()"),
            )
            .values(last_used_at=text("now()"))
            .returning(AdminToken.id, AdminToken.name, AdminToken.role)
        )
    ).first()
    if row is None:
        raise failure
    return AdminPrincipal(token_id=row.id, name=row.name, role=Role.parse(row.role))


async def _db_now(session: AsyncSession) -> datetime:
    value: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
    return value
