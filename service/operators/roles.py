"""Which admin role an operator's ID token grants: the issuer's claim, mapped to viewer/operator/admin.

An issuer marked for operator sign-in names one claim (``groups``, ``roles`` …) and, per role, the
claim values that grant it. The mapping is pure data so the console's sign-in and the admin MCP
server decide a role the same way, from the same declaration, with no I/O.

A person whose claim meets no role's values gets no access (``None``), never a default role: an
issuer shared with end users must not turn every account into a viewer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.admin.tokens import Role


@dataclass(frozen=True, slots=True)
class OperatorSignIn:
    """An issuer marked for operator sign-in: where operators prove who they are, and which role
    each value of ``role_claim`` grants. ``client_secret_env`` names the environment variable
    holding the client secret (the secret itself never sits in this object)."""

    issuer: str
    client_id: str
    client_secret_env: str | None
    role_claim: str
    roles: Mapping[Role, frozenset[str]]
    audience: str | None = None


def claim_values(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """The claim's values: a string is one value, a list its string members; anything else none.

    A space-separated string is one value, not several: an issuer that means a list sends a list,
    and splitting would let ``"viewer admin"`` (a display name, say) read as two roles.
    """
    value = claims.get(name)
    if isinstance(value, str):
        return frozenset((value,))
    if isinstance(value, list | tuple):
        return frozenset(item for item in value if isinstance(item, str))
    return frozenset()


def role_for(claims: Mapping[str, Any], signin: OperatorSignIn) -> Role | None:
    """The highest role whose values meet the claim, or ``None`` (no access)."""
    held = claim_values(claims, signin.role_claim)
    if not held:
        return None
    for role in sorted(signin.roles, reverse=True):
        if held & signin.roles[role]:
            return role
    return None
