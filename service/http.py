"""The process's one outbound HTTP client.

Building an ``httpx.AsyncClient`` costs tens of milliseconds of CPU (TLS context, certificate
store), which every request parked on the same event loop pays as a stall. So one client is built
per process by ``build_services``, shared by every outbound call (issuers, providers, API-key
checks, webhooks), and closed on shutdown. Redirects are never followed: a provider or issuer
endpoint that redirects is answering something other than what was asked. Cookies are never
kept: the client is shared by every user's calls, so a cookie one provider set while checking one
person's key must not ride along on the next person's request.

Its timeouts are part of one rule with the database's: see "Timeouts" in ``service/db/engine.py``.
"""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.request import Request

import httpx

from service.limits import json_depth

USER_AGENT = "elicitd"
# Each phase of an outbound call (connect, write, read, waiting for a pooled connection) is given
# this long; connecting alone gets less. Code that needs a bound on a whole call (a token refresh,
# whose claim must outlive it) adds an overall deadline of the same length.
TIMEOUT_SECONDS = 15.0
CONNECT_TIMEOUT_SECONDS = 5.0
# What elicitd reads of a provider's or issuer's JSON answer: tokens, metadata and keys are a few
# kilobytes; anything far larger or deeper is garbage, and a deep document would exhaust the
# decoder's stack (a ``RecursionError``, not the ``ValueError`` callers expect).
MAX_ANSWER_BYTES = 1024 * 1024
MAX_ANSWER_DEPTH = 64


class _NoCookies(DefaultCookiePolicy):
    """Refuses to store or send any cookie."""

    def set_ok(self, cookie: object, request: Request) -> bool:
        return False

    def return_ok(self, cookie: object, request: Request) -> bool:
        return False


def make_http_client(timeout_seconds: float = TIMEOUT_SECONDS) -> httpx.AsyncClient:
    """``timeout_seconds`` is ``ELICITD_OUTBOUND_TIMEOUT_SECONDS``: each phase of a call; connecting
    gets at most ``CONNECT_TIMEOUT_SECONDS`` of it."""
    timeout = httpx.Timeout(timeout_seconds, connect=min(CONNECT_TIMEOUT_SECONDS, timeout_seconds))
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
        cookies=CookieJar(policy=_NoCookies()),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
    )


def read_json(response: httpx.Response) -> Any:
    """The JSON document of an outbound call's answer, or ``ValueError`` for anything else: not
    JSON, larger than ``MAX_ANSWER_BYTES``, or nested deeper than ``MAX_ANSWER_DEPTH``."""
    body = response.content
    if len(body) > MAX_ANSWER_BYTES:
        raise ValueError("answer too large")
    if json_depth(body, stop_after=MAX_ANSWER_DEPTH) > MAX_ANSWER_DEPTH:
        raise ValueError("answer nested too deeply")
    return response.json()
