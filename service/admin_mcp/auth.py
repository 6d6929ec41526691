"""Who calls the admin MCP server: an operator's access token from the issuer marked for operator sign-in.

The MCP server is an OAuth 2.1 resource server (the MCP authorization spec): the MCP client gets
an access token at the operator issuer and sends it on every request. A token is accepted when

* it is an RFC 9068 JWT access token signed by the marked issuer, checked by the same function as
  a subject token (``verified_access_jwt``: the issuer's JWKS, asymmetric algorithms only,
  ``typ`` ``at+jwt``, ``iss``, ``sub``, ``exp``, ``nbf``), so a token of any other issuer, an ID
  token, or one past its time is refused;
* its ``aud`` or ``resource`` names this server: the mark's ``audience`` when it has one, else the
  server's own resource URL (RFC 8707): a token minted for another API of the same issuer is
  refused (no token passthrough);
* its role claim meets a role of the mark (``service.operators.roles.role_for``, the console's
  own mapping): a valid token that grants no role is refused like a bad one.

Every refusal is the SDK's ``401 invalid_token`` with the ``resource_metadata`` pointer (RFC 9728),
and one log line naming a reason from a fixed set — never the token, never a claim value. The
mark is read from the database at most every ``MARK_SECONDS``, so changing or removing it takes
effect within that time without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from service.admin.tokens import Role
from service.clock import Clock, SystemClock
from service.identity.issuers import IssuerDirectory, IssuerUnavailable
from service.identity.subject_proof import SubjectTokenInvalid, verified_access_jwt
from service.operators.roles import OperatorSignIn, role_for

logger = logging.getLogger("elicitd.admin_mcp")

MARK_SECONDS = 10.0
MAX_NAME = 200

# Where the operator sign-in mark comes from (``service.operators.store.marked_issuer``, read in a
# session of its own); None: no issuer is marked, nobody gets in.
SignInSource = Callable[[], Awaitable[OperatorSignIn | None]]


class OperatorToken(AccessToken):
    """A verified operator: the issuer, subject and a display name from the token, and the role its
    claim grants. ``token`` (the SDK's field) is the bearer value itself: never logged or shown."""

    issuer: str
    role: Role
    name: str

    def __repr__(self) -> str:
        return f"OperatorToken(issuer={self.issuer!r}, subject={self.subject!r}, role={self.role.label!r})"

    __str__ = __repr__


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {item for item in value if isinstance(item, str)}
    return set()


class OperatorTokenVerifier:
    """The SDK's ``TokenVerifier`` for operators' access tokens."""

    def __init__(
        self, issuers: IssuerDirectory, signin: SignInSource, *, resource_url: str, clock: Clock | None = None
    ) -> None:
        self._issuers = issuers
        self._source = signin
        self._resource_url = resource_url
        self._clock: Clock = clock or SystemClock()
        self._mark: tuple[float, OperatorSignIn | None] | None = None

    async def _signin(self) -> OperatorSignIn | None:
        now = self._clock.time()
        if self._mark is None or self._mark[0] <= now:
            self._mark = (now + MARK_SECONDS, await self._source())
        return self._mark[1]

    def audience(self, signin: OperatorSignIn) -> str:
        return signin.audience or self._resource_url

    async def verify_token(self, token: str) -> AccessToken | None:
        signin = await self._signin()
        if signin is None:
            return _refused("no_operator_issuer")
        try:
            resolved, claims = await verified_access_jwt(
                self._issuers, token, issuer=signin.issuer, now=self._clock.time()
            )
        except SubjectTokenInvalid as exc:
            return _refused(str(exc.extra.get("reason")))
        except IssuerUnavailable:
            return _refused("issuer_unavailable")
        audience = self.audience(signin)
        if audience not in _strings(claims.get("aud")) | _strings(claims.get("resource")):
            return _refused("audience")
        role = role_for(claims, signin)
        if role is None:
            return _refused("no_role")
        sub = str(claims["sub"])
        name = next((v for k in ("name", "preferred_username", "email") if isinstance(v := claims.get(k), str)), sub)
        scope = claims.get("scope")
        return OperatorToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or ""),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(claims["exp"]),
            resource=audience,
            subject=sub,
            claims={"iss": resolved.issuer},
            issuer=resolved.issuer,
            role=role,
            name=name[:MAX_NAME],
        )


def _refused(reason: str) -> AccessToken | None:
    """No token (the SDK answers 401), and one log line with the reason."""
    logger.info("operator token refused", extra={"reason": reason})
    return None


def current_operator() -> OperatorToken | None:
    """The operator of the request being served (the SDK's auth context), None outside one."""
    token = get_access_token()
    return token if isinstance(token, OperatorToken) else None
