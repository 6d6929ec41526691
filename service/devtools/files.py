"""Demo Files: an OAuth 2 provider with a consent screen, rotating refresh tokens, revocation, and
a files API — the "third-party account" of ``make run``.

elicitd registers it as the provider ``demo-files`` and discovers it through RFC 8414 metadata,
like any provider without a catalog entry. Its tokens are signed by a key kept under the data
directory and carry everything needed to check them, so connections survive a restart of
``make run``; which refresh tokens were used or revoked is remembered in memory only (enough to
show rotation and reuse detection, not meant to outlive the process).
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

from service.devtools import oauth
from service.devtools.issuer import USER_COOKIE
from service.devtools.keys import DevSecrets
from service.devtools.pages import DEMO_FILES_LOOK

FILES_PATH = "/dev/files"
SCOPE_WORDS = {"files:read": "See the names and sizes of your files"}
DEFAULT_SCOPES = ("files:read",)
ACCESS_TOKEN_TTL_SECONDS = 600  # short, so elicitd's refresh before expiry is seen in a sitting
REFRESH_TOKEN_TTL_SECONDS = 30 * 86400


def files_of(account: str) -> list[dict[str, Any]]:
    """Every account has the same three files, one of them named after it, so an answer shows
    whose token was used."""
    return [
        {"name": "welcome.md", "size": 1204, "modified": "2026-01-05T09:30:00Z"},
        {"name": "meeting-notes.txt", "size": 3310, "modified": "2026-02-11T14:02:00Z"},
        {"name": f"{account}-budget.xlsx", "size": 18944, "modified": "2026-03-02T08:15:00Z"},
    ]


class DemoFiles(oauth.AuthorizationServer):
    """Demo Files: an authorization server that also remembers which refresh tokens were used
    (rotation) and whose grants were revoked."""

    look = DEMO_FILES_LOOK

    def __init__(self, issuer: str, keys: DevSecrets, clients: Mapping[str, oauth.RegisteredClient]) -> None:
        super().__init__(issuer, keys, clients)
        self.token_key = keys.token_key  # parsed once, not on every token made or read
        self.used_refresh_tokens: set[str] = set()
        self.revoked_grants: set[str] = set()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "revocation_endpoint": f"{self.issuer}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "scopes_supported": list(SCOPE_WORDS),
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    def _token(self, kind: str, account: str, scope: str, client_id: str, grant_id: str, ttl: int) -> str:
        now = int(time.time())
        claims = {
            "typ": kind,
            "sub": account,
            "scope": scope,
            "client_id": client_id,
            "grant": grant_id,
            "iat": now,
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(12),
        }
        return jwt.encode({"alg": "HS256"}, claims, self.token_key)

    def read_token(self, value: str, kind: str) -> dict[str, Any] | None:
        """The claims of a live token of ``kind`` (``access`` or ``refresh``) that we issued."""
        try:
            claims = jwt.decode(value, self.token_key, algorithms=["HS256"]).claims
            jwt.JWTClaimsRegistry(exp={"essential": True}).validate(claims)
        except (JoseError, ValueError):
            return None
        if claims.get("typ") != kind or claims.get("grant") in self.revoked_grants:
            return None
        return claims

    def token_response(self, account: str, scope: str, client_id: str, grant_id: str) -> Response[Any]:
        return Response(
            {
                "access_token": self._token("access", account, scope, client_id, grant_id, ACCESS_TOKEN_TTL_SECONDS),
                "token_type": "Bearer",
                "expires_in": ACCESS_TOKEN_TTL_SECONDS,
                "refresh_token": self._token("refresh", account, scope, client_id, grant_id, REFRESH_TOKEN_TTL_SECONDS),
                "scope": scope,
            },
            headers=oauth.NO_STORE,
        )

    def exchange_code(self, client: oauth.RegisteredClient, form: Mapping[str, str]) -> Response[Any]:
        grant = self.redeem_code(client, form)
        if grant is None:
            return oauth.token_error("invalid_grant", "The code is unknown, used, expired or not yours.")
        return self.token_response(grant.user, " ".join(grant.scopes), client.client_id, secrets.token_urlsafe(12))

    def refresh(self, client: oauth.RegisteredClient, form: Mapping[str, str]) -> Response[Any]:
        claims = self.read_token(form.get("refresh_token", ""), "refresh")
        if claims is None or claims.get("client_id") != client.client_id:
            return oauth.token_error("invalid_grant", "The refresh token is unknown, expired or revoked.")
        if claims["jti"] in self.used_refresh_tokens:
            # A rotated refresh token came back: someone kept a copy. End the whole grant (RFC 9700).
            self.revoked_grants.add(str(claims["grant"]))
            return oauth.token_error("invalid_grant", "The refresh token was already used.")
        self.used_refresh_tokens.add(str(claims["jti"]))
        return self.token_response(str(claims["sub"]), str(claims["scope"]), client.client_id, str(claims["grant"]))


def files_routes(files: DemoFiles) -> list[HTTPRouteHandler]:
    def consent_page(
        request_id: str,
        request: oauth.AuthorizationRequest,
        account: str,
        *,
        signed_in: bool,
        problem: str | None = None,
    ) -> Response[str]:
        return files.page(
            "consent.html",
            request_id,
            request,
            problem=problem,
            note="its files are made up",
            title="Allow access",
            action=f"{FILES_PATH}/authorize",
            account=account,
            signed_in=signed_in,
            scopes=[{"name": s, "words": SCOPE_WORDS[s]} for s in request.scopes],
        )

    # RFC 8414 §3: the metadata of an issuer with a path lives at the path-inserted well-known URL.
    @get(f"/.well-known/oauth-authorization-server{FILES_PATH}", include_in_schema=False, sync_to_thread=False)
    def discovery() -> dict[str, Any]:
        return files.metadata()

    @get(f"{FILES_PATH}/authorize", include_in_schema=False)
    async def authorize(request: Request[Any, Any, Any]) -> Response[Any]:
        checked = files.start(request, allowed_scopes=tuple(SCOPE_WORDS), default_scopes=DEFAULT_SCOPES)
        if isinstance(checked, Response):
            return checked
        signed_in = oauth.normalize_user(request.cookies.get(USER_COOKIE))
        account = signed_in or checked.login_hint or ""
        return consent_page(files.pending.put(checked), checked, account, signed_in=signed_in is not None)

    @post(f"{FILES_PATH}/authorize", include_in_schema=False, status_code=303)
    async def decide(request: Request[Any, Any, Any]) -> Response[Any]:
        answered = await files.answer(
            request, expired="This page has expired. Go back to the application and start again."
        )
        if isinstance(answered, Response):
            return answered
        form, request_id, waiting = answered
        if form.get("decision") != "allow":
            return files.decline(request_id, waiting, "Access denied.")
        account = oauth.normalize_user(str(form.get("account", "")))
        if account is None:
            problem = "An account name is 1-64 letters, digits, '.', '_' or '-'."
            return consent_page(request_id, waiting, str(form.get("account", "")), signed_in=False, problem=problem)
        files.pending.pop(request_id)
        return files.issue_code(waiting, account)

    @post(f"{FILES_PATH}/token", include_in_schema=False, status_code=200)
    async def token(request: Request[Any, Any, Any]) -> Response[Any]:
        form, client = await files.client_request(request)
        if client is None:
            return oauth.invalid_client()
        if form.get("grant_type") == "authorization_code":
            return files.exchange_code(client, form)
        if form.get("grant_type") == "refresh_token":
            return files.refresh(client, form)
        return oauth.token_error("unsupported_grant_type", "Use authorization_code or refresh_token.")

    @post(f"{FILES_PATH}/revoke", include_in_schema=False, status_code=200)
    async def revoke(request: Request[Any, Any, Any]) -> Response[Any]:
        """RFC 7009: revoking either token ends its grant; an unknown token is not an error."""
        form, client = await files.client_request(request)
        if client is None:
            return oauth.invalid_client()
        value = form.get("token", "")
        claims = files.read_token(value, "refresh") or files.read_token(value, "access")
        if claims is not None and claims.get("client_id") == client.client_id:
            files.revoked_grants.add(str(claims["grant"]))
        return Response({}, headers=oauth.NO_STORE)

    def account_of(request: Request[Any, Any, Any]) -> dict[str, Any] | None:
        value = oauth.bearer_token(request)
        return None if value is None else files.read_token(value, "access")

    @get(f"{FILES_PATH}/api/me", include_in_schema=False)
    async def me(request: Request[Any, Any, Any]) -> Response[Any]:
        claims = account_of(request)
        if claims is None:
            return oauth.bearer_error("The access token is not valid here.")
        account = str(claims["sub"])
        return Response({"id": f"df-{account}", "login": account, "name": account.capitalize()}, headers=oauth.NO_STORE)

    @get(f"{FILES_PATH}/api/files", include_in_schema=False)
    async def list_files(request: Request[Any, Any, Any]) -> Response[Any]:
        claims = account_of(request)
        if claims is None:
            return oauth.bearer_error("The access token is not valid here.")
        if "files:read" not in str(claims.get("scope", "")).split():
            return Response(
                {"error": "insufficient_scope"},
                status_code=403,
                headers={"WWW-Authenticate": 'Bearer error="insufficient_scope", scope="files:read"', **oauth.NO_STORE},
            )
        return Response({"files": files_of(str(claims["sub"]))}, headers=oauth.NO_STORE)

    return [discovery, authorize, decide, token, revoke, me, list_files]
