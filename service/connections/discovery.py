"""Authorization-server metadata (RFC 8414 / OpenID Connect Discovery), fetched once and cached.

Metadata changes rarely and every connect and refresh needs it, so each process keeps a copy for
``ttl`` seconds (a replica that has none simply fetches it: nothing here is shared state). The
document's ``issuer`` must equal the configured issuer exactly (RFC 8414 §3.3): otherwise a
compromised or misconfigured discovery URL could point us at another server's endpoints.

A fetch is network I/O: callers read the provider row, let its session go, and only then ask
this cache (``ConnectionService.provider``), so a slow issuer never holds a pooled connection.
Fetches go out on the process's shared HTTP client; one fetch per issuer at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from service.clock import Clock, SystemClock
from service.errors import UpstreamError
from service.http import make_http_client
from service.oauth_client import MetadataFailed, fetch_metadata

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
    def __init__(
        self,
        *,
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        ttl: float = 3600.0,
        timeout: float = 10.0,
    ) -> None:
        """``http`` is the process's shared client; a one-off check from a command that has none
        (``elicitd providers add``) gets a client for the one fetch."""
        self._http = http
        self._clock = clock or SystemClock()
        self._ttl = ttl
        self._timeout = timeout
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def forget(self) -> None:
        self._entries.clear()

    async def get(self, issuer: str, discovery_url: str | None = None) -> dict[str, Any]:
        key = discovery_url or issuer
        cached = self._entries.get(key)
        if cached is not None and cached[0] > self._clock.monotonic():
            return cached[1]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._entries.get(key)
            if cached is not None and cached[0] > self._clock.monotonic():
                return cached[1]
            document = await self._fetch(issuer, discovery_url)
            self._entries[key] = (self._clock.monotonic() + self._ttl, document)
            return document

    async def _fetch(self, issuer: str, discovery_url: str | None) -> dict[str, Any]:
        if self._http is not None:
            return await self._fetch_with(self._http, issuer, discovery_url)
        async with make_http_client() as http:
            return await self._fetch_with(http, issuer, discovery_url)

    async def _fetch_with(self, http: httpx.AsyncClient, issuer: str, discovery_url: str | None) -> dict[str, Any]:
        urls = [discovery_url] if discovery_url else candidate_urls(issuer)
        for url in urls:
            try:
                return await fetch_metadata(http, url, issuer=issuer, timeout=self._timeout, trailing_slash=True)
            except MetadataFailed as failed:
                if failed.reason == "issuer_mismatch":
                    logger.warning("provider metadata names another issuer", extra={"code": "issuer_mismatch"})
                    raise DiscoveryFailed("The provider's metadata names a different issuer than configured.") from None
                if failed.reason == "unreachable":
                    error_type = type(failed.__cause__).__name__
                    logger.warning("provider metadata fetch failed", extra={"error_type": error_type})
        raise DiscoveryFailed("The provider's metadata could not be fetched.")
