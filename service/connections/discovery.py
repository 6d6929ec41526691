"""Authorization-server metadata (RFC 8414 / OpenID Connect Discovery), fetched once and cached.

Metadata changes rarely and every connect and refresh needs it, so each process keeps a copy for
``ttl`` seconds (a replica that has none simply fetches it: nothing here is shared state). The
document's ``issuer`` must equal the configured issuer exactly (RFC 8414 §3.3): otherwise a
compromised or misconfigured discovery URL could point us at another server's endpoints.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from service.errors import UpstreamError

logger = logging.getLogger("elicitd.connections.discovery")


class DiscoveryFailed(UpstreamError):
    code = "provider_discovery_failed"
    title = "Provider metadata unavailable"


def candidate_urls(issuer: str) -> list[str]:
    """OIDC first (``issuer + /.well-known/openid-configuration``), then RFC 8414's path-inserted form."""
    issuer = issuer.rstrip("/")
    parts = urlsplit(issuer)
    rfc8414 = urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-authorization-server" + parts.path, "", ""))
    return [issuer + "/.well-known/openid-configuration", rfc8414]


class MetadataCache:
    def __init__(self, *, ttl: float = 3600.0, timeout: float = 10.0) -> None:
        self._ttl = ttl
        self._timeout = timeout
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def forget(self) -> None:
        self._entries.clear()

    async def get(self, issuer: str, discovery_url: str | None = None) -> dict[str, Any]:
        key = discovery_url or issuer
        cached = self._entries.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._entries.get(key)
            if cached is not None and cached[0] > time.monotonic():
                return cached[1]
            document = await self._fetch(issuer, discovery_url)
            self._entries[key] = (time.monotonic() + self._ttl, document)
            return document

    async def _fetch(self, issuer: str, discovery_url: str | None) -> dict[str, Any]:
        urls = [discovery_url] if discovery_url else candidate_urls(issuer)
        async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as http:
            for url in urls:
                try:
                    response = await http.get(url, headers={"Accept": "application/json"})
                except httpx.HTTPError as exc:
                    logger.warning("provider metadata fetch failed", extra={"error_type": type(exc).__name__})
                    continue
                if response.status_code != 200:
                    continue
                try:
                    document = response.json()
                except ValueError:
                    continue
                if not isinstance(document, dict):
                    continue
                if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
                    logger.warning("provider metadata names another issuer", extra={"code": "issuer_mismatch"})
                    raise DiscoveryFailed("The provider's metadata names a different issuer than configured.")
                return document
        raise DiscoveryFailed("The provider's metadata could not be fetched.")
