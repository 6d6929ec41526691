"""The process's one outbound HTTP client.

Building an ``httpx.AsyncClient`` costs tens of milliseconds of CPU (TLS context, certificate
store), which every request parked on the same event loop pays as a stall. So one client is built
per process by ``build_services``, shared by every outbound call (issuers, providers, API-key
checks, webhooks), and closed on shutdown. Redirects are never followed: a provider or issuer
endpoint that redirects is answering something other than what was asked.
"""

from __future__ import annotations

import httpx

USER_AGENT = "elicitd"
# An outbound call is given this long in all; connecting alone gets less. See docs/architecture.md
# for how this relates to the database's statement and lock timeouts.
TIMEOUT_SECONDS = 15.0
CONNECT_TIMEOUT_SECONDS = 5.0


def make_http_client() -> httpx.AsyncClient:
    timeout = httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
    )
