"""A ``TokenVerifier`` for an MCP server whose users' access tokens are JWTs (``elicitd[mcp]``).

The MCP SDK asks a resource server for a ``TokenVerifier`` but ships none for JWTs; elicitd's
helpers need one that leaves the issuer in ``claims["iss"]`` (the subject is ``iss`` + ``sub``).
``JwtVerifier`` checks the signature against the issuer's JWKS (found through its discovery
document, cached, fetched again when a token names a key id it has not seen, at most every few
seconds), then ``iss``, ``aud``, ``exp`` and ``sub``::

    from elicitd_client.auth import JwtVerifier

    verifier = JwtVerifier("https://id.example.com", audience="https://files.example.com/mcp")
    mcp = MCPServer("files", token_verifier=verifier, auth=AuthSettings(...), ...)

Only asymmetric algorithms are accepted: an HMAC-signed token would be "verified" with a secret
the verifier does not have, and ``none`` with nothing. It uses PyJWT, which ``elicitd[mcp]``
installs (the MCP SDK depends on it too).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import httpx
import jwt
from mcp.server.auth.provider import AccessToken

logger = logging.getLogger("elicitd_client.auth")

# A token naming an unknown key may mean the issuer rotated its keys: refetch, but never more often
# than this, so a stream of forged tokens cannot turn the server into a JWKS request amplifier.
REFRESH_MIN_SECONDS = 5.0


class JwtVerifier:
    """Verify bearer JWTs signed by ``issuer`` for ``audience`` (one value or several)."""

    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        *,
        jwks_url: str | None = None,
        algorithms: Sequence[str] = ("RS256", "ES256", "PS256", "EdDSA"),
        leeway: float = 30.0,
        cache_seconds: float = 300.0,
        timeout: float = 10.0,
    ) -> None:
        self.issuer = issuer
        self.audience = audience if isinstance(audience, str) else list(audience)
        self.algorithms = [a for a in algorithms if not a.startswith("HS") and a != "none"]
        self.leeway = leeway
        self.cache_seconds = cache_seconds
        self.timeout = timeout
        self._jwks_url = jwks_url
        self._keys: dict[str, jwt.PyJWK] = {}
        self._tried = -math.inf  # when keys were last asked for (monotonic), successfully or not
        self._lock = asyncio.Lock()

    async def _load_keys(self, *, force: bool) -> None:
        async with self._lock:
            since = time.monotonic() - self._tried
            if since < (self.cache_seconds if self._keys and not force else REFRESH_MIN_SECONDS):
                return
            # A failed attempt counts too: while the issuer is down or answers nonsense, requests
            # are refused at once instead of queueing on this lock behind one timeout after another.
            self._tried = time.monotonic()
            try:
                self._keys = await self._fetch_keys()
            except (httpx.HTTPError, ValueError, RecursionError) as exc:
                logger.warning(
                    "issuer keys not fetched; the ones known stay",
                    extra={"issuer": self.issuer, "error_type": type(exc).__name__},
                )

    async def _fetch_keys(self) -> dict[str, jwt.PyJWK]:
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as http:
            if self._jwks_url is None:
                discovery = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
                meta = (await http.get(discovery)).raise_for_status().json()
                if not isinstance(meta, dict) or not isinstance(meta.get("jwks_uri"), str):
                    raise ValueError("the discovery document names no jwks_uri")
                self._jwks_url = meta["jwks_uri"]
            document = (await http.get(self._jwks_url)).raise_for_status().json()
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ValueError("the JWKS document has no list of keys")
        keys: dict[str, jwt.PyJWK] = {}
        for key in entries:
            if not isinstance(key, dict) or key.get("use", "sig") != "sig":
                continue
            try:
                keys[str(key.get("kid", ""))] = jwt.PyJWK.from_json(json.dumps(key))
            except jwt.PyJWTError:
                continue  # a key type this PyJWT cannot use; the others still work
        return keys

    async def _key(self, kid: str) -> jwt.PyJWK | None:
        await self._load_keys(force=False)
        if kid not in self._keys:
            await self._load_keys(force=True)
        return self._keys.get(kid)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's ``AccessToken`` for a valid token (``claims`` kept, ``iss`` included), else None."""
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
        except (jwt.PyJWTError, KeyError, ValueError) as exc:
            logger.info("bearer token rejected", extra={"error_type": type(exc).__name__})
            return None
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else [str(s) for s in claims.get("scp") or []]
        audience = self.audience if isinstance(self.audience, str) else self.audience[0]
        client_id = claims.get("client_id") or claims.get("azp") or audience
        return AccessToken(
            token=token,
            client_id=str(client_id),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            subject=str(claims["sub"]),
            resource=audience,
            claims=claims,
        )
