"""The issuer marked for operator sign-in, as a row: declared in the config file or with
``elicitd operators signin``, read by the console's sign-in and the admin MCP server.

The mark sits on an ``issuers`` row, so operators sign in through the same issuer directory
(discovery and keys cached), login attempts and ID-token checks as end users do. Changing the
mark, or removing it, ends every console session at once: a session's role came from the old
mapping, and must not outlive it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.tokens import Role
from service.crypto.vault import Vault
from service.errors import ConfigurationError, InvalidRequest, NotFound
from service.identity.issuers import (
    DEFAULT_SCOPES,
    IssuerConfig,
    check_config_table,
    check_issuer_url,
    env_secret,
    upsert_issuer,
)
from service.operators.roles import OperatorSignIn

MAX_VALUES = 64
MAX_VALUE_LENGTH = 256


class IssuerNotRegistered(NotFound):
    code = "issuer_not_found"
    title = "No such issuer"


@dataclass(frozen=True, slots=True)
class MarkedIssuer:
    """The marked issuer's row id with its declaration (nothing secret in either)."""

    issuer_id: uuid.UUID
    signin: OperatorSignIn


def role_values(roles: Mapping[str, Any], *, where: str = "roles") -> dict[Role, frozenset[str]]:
    """``{"viewer": [...], "operator": [...], "admin": [...]}`` checked: known role names, lists of
    non-empty strings; at least one value in all (a mapping granting nothing is a mistake)."""
    if not isinstance(roles, Mapping):
        raise InvalidRequest(f"{where} must map viewer, operator and admin to lists of claim values.")
    found: dict[Role, frozenset[str]] = {}
    for name, given in roles.items():
        role = Role.parse(str(name))
        values = [given] if isinstance(given, str) else given
        if not isinstance(values, list | tuple) or len(values) > MAX_VALUES:
            raise InvalidRequest(f"{where}.{role.label} must be a list of at most {MAX_VALUES} claim values.")
        if not all(isinstance(v, str) and v.strip() and len(v) <= MAX_VALUE_LENGTH for v in values):
            raise InvalidRequest(f"{where}.{role.label}: each claim value is a non-empty string.")
        found[role] = frozenset(values)
    if not any(found.values()):
        raise InvalidRequest(f"{where} grants no role: name at least one claim value.")
    return found


def check_role_claim(name: str) -> str:
    if not name or not name.strip() or len(name) > MAX_VALUE_LENGTH:
        raise InvalidRequest("role_claim must name the ID token's claim that carries the role (e.g. groups).")
    return name


async def mark_issuer(
    session: AsyncSession,
    issuer: str,
    *,
    role_claim: str,
    roles: Mapping[Role, frozenset[str]],
    audience: str | None = None,
) -> uuid.UUID:
    """Mark the registered ``issuer`` for operator sign-in (replacing any earlier mark) and end every
    console session. Does not commit. ``IssuerNotRegistered`` when there is no such issuer."""
    check_role_claim(role_claim)
    if audience is not None:
        check_issuer_url(audience, what="audience")
    row = (await session.execute(text("SELECT id FROM issuers WHERE issuer = :i"), {"i": issuer})).first()
    if row is None:
        raise IssuerNotRegistered("No issuer with this URL is registered (add it with `elicitd issuers add`).")
    stored = {role.label: sorted(values) for role, values in sorted(roles.items())}
    await session.execute(
        text("""
        INSERT INTO operator_signin (issuer_id, role_claim, roles, audience)
        VALUES (:id, :claim, CAST(:roles AS jsonb), :audience)
        ON CONFLICT (slot) DO UPDATE SET issuer_id = EXCLUDED.issuer_id, role_claim = EXCLUDED.role_claim,
            roles = EXCLUDED.roles, audience = EXCLUDED.audience, updated_at = now()
        """),
        {"id": row.id, "claim": role_claim, "roles": json.dumps(stored), "audience": audience},
    )
    await session.execute(text("DELETE FROM operator_sessions"))
    return uuid.UUID(str(row.id))


async def clear_mark(session: AsyncSession) -> bool:
    """No issuer is marked any more, and no console session lives on; False when none was."""
    result = await session.execute(text("DELETE FROM operator_signin RETURNING issuer_id"))
    removed = result.first() is not None
    await session.execute(text("DELETE FROM operator_sessions"))
    return removed


async def marked_issuer(session: AsyncSession) -> MarkedIssuer | None:
    """The enabled issuer marked for operator sign-in, or None (then nobody can sign in)."""
    row = (
        await session.execute(
            text("""
        SELECT o.issuer_id, i.issuer, i.client_id, o.role_claim, o.roles, o.audience
        FROM operator_signin o JOIN issuers i ON i.id = o.issuer_id
        WHERE i.enabled
        """)
        )
    ).first()
    if row is None:
        return None
    roles = {Role.parse(name): frozenset(values) for name, values in dict(row.roles).items()}
    signin = OperatorSignIn(
        issuer=row.issuer,
        client_id=row.client_id,
        client_secret_env=None,
        role_claim=row.role_claim,
        roles=roles,
        audience=row.audience,
    )
    return MarkedIssuer(issuer_id=uuid.UUID(str(row.issuer_id)), signin=signin)


def public_view(marked: MarkedIssuer | None) -> dict[str, Any]:
    """What ``elicitd operators show`` prints: the declaration, never a secret."""
    if marked is None:
        return {"issuer": None}
    signin = marked.signin
    return {
        "issuer": signin.issuer,
        "client_id": signin.client_id,
        "role_claim": signin.role_claim,
        **{role.label: sorted(signin.roles.get(role, ())) for role in Role},
        "audience": signin.audience,
    }


_SECTION_KEYS = frozenset(
    {"issuer", "client_id", "client_secret_env", "display_name", "scopes", "role_claim", "roles", "audience"}
)


def parse_section(entry: Any, env: Mapping[str, str]) -> tuple[OperatorSignIn, str | None, dict[str, Any]]:
    """The ``[operator_signin]`` table: the declaration, the client secret read from the variable it
    names, and the issuer's other keys (``display_name``, ``scopes``)."""
    where = "config file: operator_signin"
    check_config_table(entry, where, _SECTION_KEYS)
    secret = env_secret(entry, "client_secret_env", env, where)
    try:
        signin = OperatorSignIn(
            issuer=str(entry["issuer"]),
            client_id=str(entry.get("client_id") or ""),
            client_secret_env=None if entry.get("client_secret_env") is None else str(entry["client_secret_env"]),
            role_claim=check_role_claim(str(entry["role_claim"])),
            roles=role_values(entry["roles"], where=f"{where}.roles"),
            audience=None if entry.get("audience") is None else str(entry["audience"]),
        )
    except KeyError as exc:
        raise ConfigurationError(f"{where}: '{exc.args[0]}' is required") from None
    except InvalidRequest as exc:
        raise ConfigurationError(f"{where}: {exc.detail}") from None
    extra = {key: entry[key] for key in ("display_name", "scopes") if key in entry}
    return signin, secret, extra


async def apply_config_section(session: AsyncSession, vault: Vault, entry: Any, env: Mapping[str, str]) -> int:
    """The config file's ``[operator_signin]``: with ``client_id`` the issuer is saved too (as an
    ``[[issuers]]`` entry would be); without, it must be registered already (``[[issuers]]``, or
    ``elicitd issuers add``). Then it is marked for operator sign-in."""
    signin, secret, extra = parse_section(entry, env)
    where = "config file: operator_signin"
    try:
        if signin.client_id:
            scopes: Sequence[str] = extra.get("scopes", DEFAULT_SCOPES)
            await upsert_issuer(
                session,
                vault,
                IssuerConfig(
                    issuer=signin.issuer,
                    client_id=signin.client_id,
                    client_secret=secret,
                    display_name=extra.get("display_name"),
                    scopes=tuple(scopes),
                ),
            )
        await mark_issuer(
            session, signin.issuer, role_claim=signin.role_claim, roles=signin.roles, audience=signin.audience
        )
    except InvalidRequest as exc:
        raise ConfigurationError(f"{where}: {exc.detail}") from None
    except NotFound:
        raise ConfigurationError(f"{where}: issuer {signin.issuer} is not registered; give client_id") from None
    return 1
