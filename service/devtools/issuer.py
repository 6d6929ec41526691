"""Dev ID: an OpenID Connect issuer whose sign-in page lets you pick or type a user name.

It is the identity provider of the users of ``make run``: elicitd signs browsers in here (the
authorization code flow with PKCE S256, ``nonce`` and ``state``, an ES256 ID token checked against
``/jwks``), and the MCP host of ``make demo`` gets its user's access token from ``/mint`` — the
step a real host would do with the MCP authorization flow. The signed-in name is also kept in a
cookie that Demo Files reads, as one company's sign-in often serves its own apps.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from litestar import Request, Response, get, post
from litestar.handlers import HTTPRouteHandler

from service.devtools.keys import DevSecrets
from service.devtools.oauth import (
    NO_STORE,
    AuthorizationRequest,
    AuthorizationServer,
    Grant,
    RegisteredClient,
    bearer_error,
    bearer_token,
    invalid_client,
    normalize_user,
    token_error,
)
from service.devtools.pages import DEV_ID_LOOK

ID_PATH = "/dev/id"
USER_COOKIE = "elicitd_dev_user"  # read by Demo Files; Path=/dev, so elicitd's own pages never see it
SCOPES = ("openid", "profile")
SUGGESTED_USERS = ("alice", "bob", "carol")
ID_TOKEN_TTL_SECONDS = 300
ACCESS_TOKEN_TTL_SECONDS = 3600
MAX_MINTED_TTL_SECONDS = 86400


class DevIssuer(AuthorizationServer):
    """Dev ID: an authorization server that signs ES256 ID and access tokens."""

    look = DEV_ID_LOOK

    def __init__(self, issuer: str, keys: DevSecrets, clients: Mapping[str, RegisteredClient]) -> None:
        super().__init__(issuer, keys, clients)
        # Parsed once: importing the EC key took as long as the signature it then made (~50 µs).
        self.signing_key = keys.signing_key
        self.jwks = keys.public_jwks()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
            "scopes_supported": list(SCOPES),
            "claims_supported": ["sub", "name", "preferred_username", "iss", "aud", "exp", "iat", "nonce"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    def sign(self, claims: dict[str, Any], *, typ: str = "JWT") -> str:
        return jwt.encode({"alg": "ES256", "kid": self.keys.kid, "typ": typ}, claims, self.signing_key)

    def id_token(self, grant: Grant) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": grant.user,
            "aud": grant.client_id,
            "iat": now,
            "exp": now + ID_TOKEN_TTL_SECONDS,
            "auth_time": grant.auth_time,
            "name": grant.user.capitalize(),
            "preferred_username": grant.user,
        }
        if grant.nonce is not None:
            claims["nonce"] = grant.nonce
        return self.sign(claims)

    def access_token(self, sub: str, *, audience: str, client_id: str, scope: str, ttl: int) -> str:
        """An RFC 9068 access token: ``typ: at+jwt``, which elicitd requires of a subject token (an
        ID token, ``typ: JWT``, is not one). It names the user as the ID token does
        (``preferred_username``), the claim ``make run`` maps to an operator's role, so a token
        minted for ``operator`` calls the admin MCP server as an operator."""
        now = int(time.time())
        return self.sign(
            {
                "iss": self.issuer,
                "sub": sub,
                "preferred_username": sub,
                "aud": audience,
                "client_id": client_id,
                "scope": scope,
                "iat": now,
                "exp": now + ttl,
                "jti": secrets.token_urlsafe(12),
            },
            typ="at+jwt",
        )

    def verify_access_token(self, token: str, audience: str | None = None) -> dict[str, Any] | None:
        """The claims of an access token this issuer signed (for ``audience`` when given)."""
        aud: jwt.ClaimsOption = {"essential": True}
        if audience is not None:
            aud["value"] = audience
        try:
            claims = jwt.decode(token, self.signing_key, algorithms=["ES256"]).claims
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": self.issuer}, aud=aud, exp={"essential": True}
            ).validate(claims)
        except (JoseError, ValueError):
            return None
        return claims


def issuer_routes(dev: DevIssuer) -> list[HTTPRouteHandler]:
    def sign_in_page(request_id: str, request: AuthorizationRequest, problem: str | None = None) -> Response[str]:
        return dev.page(
            "sign_in.html",
            request_id,
            request,
            problem=problem,
            note="there are no passwords, and whoever you pick is who you are on this machine",
            title="Sign in",
            action=f"{ID_PATH}/authorize",
            users=SUGGESTED_USERS,
            hint=request.login_hint or "",
            issuer=dev.issuer,
        )

    @get(f"{ID_PATH}/.well-known/openid-configuration", include_in_schema=False, sync_to_thread=False)
    def discovery() -> dict[str, Any]:
        return dev.metadata()

    @get(f"{ID_PATH}/jwks", include_in_schema=False, sync_to_thread=False)
    def jwks() -> dict[str, Any]:
        return dev.jwks

    @get(f"{ID_PATH}/authorize", include_in_schema=False)
    async def authorize(request: Request[Any, Any, Any]) -> Response[Any]:
        checked = dev.start(request, allowed_scopes=SCOPES, default_scopes=("openid",))
        if isinstance(checked, Response):
            return checked
        if "openid" not in checked.scopes:
            return dev.send_back(checked, error="invalid_scope", error_description="openid is required.")
        return sign_in_page(dev.pending.put(checked), checked)

    @post(f"{ID_PATH}/authorize", include_in_schema=False, status_code=303)
    async def sign_in(request: Request[Any, Any, Any]) -> Response[Any]:
        answered = await dev.answer(
            request, expired="This sign-in page has expired. Go back to the application and start again."
        )
        if isinstance(answered, Response):
            return answered
        form, request_id, waiting = answered
        if form.get("cancel"):
            return dev.decline(request_id, waiting, "Sign-in cancelled.")
        user = normalize_user(str(form.get("username", "")))
        if user is None:
            return sign_in_page(request_id, waiting, "A user name is 1-64 letters, digits, '.', '_' or '-'.")
        dev.pending.pop(request_id)
        response = dev.issue_code(waiting, user)
        response.set_cookie(USER_COOKIE, user, path="/dev", httponly=True, samesite="lax")
        return response

    @post(f"{ID_PATH}/token", include_in_schema=False, status_code=200)
    async def token(request: Request[Any, Any, Any]) -> Response[Any]:
        form, client = await dev.client_request(request)
        if client is None:
            return invalid_client()
        if form.get("grant_type") != "authorization_code":
            return token_error("unsupported_grant_type", "Only authorization_code is supported here.")
        grant = dev.redeem_code(client, form)
        if grant is None:
            return token_error("invalid_grant", "The code is unknown, used, expired or not yours.")
        scope = " ".join(grant.scopes)
        return Response(
            {
                "access_token": dev.access_token(
                    grant.user,
                    audience=client.client_id,
                    client_id=client.client_id,
                    scope=scope,
                    ttl=ACCESS_TOKEN_TTL_SECONDS,
                ),
                "token_type": "Bearer",
                "expires_in": ACCESS_TOKEN_TTL_SECONDS,
                "id_token": dev.id_token(grant),
                "scope": scope,
            },
            headers=NO_STORE,
        )

    @get(f"{ID_PATH}/userinfo", include_in_schema=False)
    async def userinfo(request: Request[Any, Any, Any]) -> Response[Any]:
        value = bearer_token(request)
        claims = None if value is None else dev.verify_access_token(value)
        if claims is None:
            return bearer_error("The access token is not valid here.")
        sub = str(claims["sub"])
        return Response({"sub": sub, "name": sub.capitalize(), "preferred_username": sub}, headers=NO_STORE)

    @post(f"{ID_PATH}/mint", include_in_schema=False, status_code=200)
    async def mint(data: dict[str, Any]) -> Response[Any]:
        """A user's access token for an MCP server, without a browser: what the MCP host of
        ``make demo`` would otherwise obtain through the MCP authorization flow."""
        sub = normalize_user(str(data.get("sub", "")))
        audience = data.get("audience")
        ttl = data.get("expires_in", ACCESS_TOKEN_TTL_SECONDS)
        if sub is None or not isinstance(audience, str) or not audience:
            return token_error("invalid_request", "Give 'sub' (a user name) and 'audience' (the MCP server).")
        if not isinstance(ttl, int) or not 0 < ttl <= MAX_MINTED_TTL_SECONDS:
            return token_error("invalid_request", f"'expires_in' is 1-{MAX_MINTED_TTL_SECONDS} seconds.")
        scope = str(data.get("scope", ""))
        return Response(
            {
                "access_token": dev.access_token(sub, audience=audience, client_id="dev-mint", scope=scope, ttl=ttl),
                "token_type": "Bearer",
                "expires_in": ttl,
            },
            headers=NO_STORE,
        )

    return [discovery, jwks, authorize, sign_in, token, userinfo, mint]
