"""OAuth resource-server side of the example: verify the MCP client's bearer JWT.

The SDK ships no JWT verifier, so this is one: signature against the issuer's JWKS (found through
its discovery document, cached, re-fetched once when a token names an unknown key id), then
``iss``, ``aud`` and ``exp``. ``claims["iss"]`` is kept on the ``AccessToken`` because both the
SDK's request-state binding and elicitd's subject read it from there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import jwt
from mcp.server.auth.provider import AccessToken

logger = logging.getLogger("example.auth")


class JwtVerifier:
    """A ``TokenVerifier`` for JWT access tokens signed by ``issuer`` for ``audience``."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        jwks_url: str | None = None,
        algorithms: tuple[str, ...] = ("RS256", "ES256"),
        leeway: float = 30.0,
        cache_seconds: float = 300.0,
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self.algorithms = list(algorithms)
        self.leeway = leeway
        self.cache_seconds = cache_seconds
        self._jwks_url = jwks_url
        self._keys: dict[str, Any] = {}
        self._fetched = 0.0
        self._lock = asyncio.Lock()

    async def _load_keys(self, *, force: bool) -> None:
        async with self._lock:
            if not force and self._keys and time.monotonic() - self._fetched < self.cache_seconds:
                return
            if force and time.monotonic() - self._fetched < 5:
                return  # an unknown kid must not turn into one JWKS fetch per request
            async with httpx.AsyncClient(timeout=10) as http:
                if self._jwks_url is None:
                    meta = (await http.get(f"{self.issuer}/.well-known/openid-configuration")).json()
                    self._jwks_url = str(meta["jwks_uri"])
                document = (await http.get(self._jwks_url)).json()
            self._keys = {
                str(key.get("kid", "")): jwt.PyJWK.from_json(json.dumps(key))
                for key in document.get("keys", [])
                if key.get("use", "sig") == "sig"
            }
            self._fetched = time.monotonic()

    async def _key(self, kid: str) -> Any:
        await self._load_keys(force=False)
        if kid not in self._keys:
            await self._load_keys(force=True)
        return self._keys.get(kid)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            header = jwt.get_unverified_header(token)
            key = await self._key(str(header.get("kid", "")))
            if key is None:
                return None
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "sub", "aud"]},
            )
        except (jwt.PyJWTError, httpx.HTTPError, KeyError, ValueError) as exc:
            logger.info("bearer token rejected: %s", type(exc).__name__)
            return None
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else list(claims.get("scp") or [])
        client_id = claims.get("client_id") or claims.get("azp") or self.audience
        return AccessToken(
            token=token,
            client_id=str(client_id),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            subject=str(claims["sub"]),
            resource=self.audience,
            claims=claims,
        )
