"""What a health probe's answer means, for OAuth connections and API-key ones alike.

A probe is read without trusting the answer: its status, a rate-limit sign, and (for an OAuth
account endpoint) one field naming the account. Only an answer that can mean nothing else marks a
connection ``needs_reauthorization``; everything else is *unknown* and marks nothing
(``service.connections.probes``, ``service.connections.key_probes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

# Health reasons a probe gives.
ACCOUNT_CHANGED = "account_changed"
PROBE_UNAUTHORIZED = "probe_unauthorized"
PROBE_FORBIDDEN = "probe_forbidden"

# A probe's outcome, as the probe counter says it.
OK = "ok"
NEEDS_REAUTHORIZATION = "needs_reauthorization"
REFRESHED = "refreshed"
UNKNOWN = "unknown"
SKIPPED = "skipped"
# An OAuth probe's 401: the refresh token decides.
REFRESH = "refresh"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a probe's answer means: ``OK``, ``UNKNOWN``, ``REFRESH`` (the refresh token decides) or
    ``NEEDS_REAUTHORIZATION`` with the reason and the provider's status."""

    outcome: str
    reason: str | None = None
    http_status: int | None = None


def rate_limited(response: httpx.Response) -> bool:
    """A 403 that says "slow down" (GitHub answers a rate limit so) is no verdict on the grant."""
    return "retry-after" in response.headers or response.headers.get("x-ratelimit-remaining") == "0"


def key_verdict(response: httpx.Response) -> Verdict:
    """An API key's check, read as its live check at entry reads it (``service.apikeys.service``):
    any 2xx accepts the key (the body is never parsed), 401 and 403 refuse it — a 403 with a
    rate-limit sign excepted — and anything else says nothing about the key."""
    status = response.status_code
    if 200 <= status < 300:
        return Verdict(OK)
    if status == 401:
        return Verdict(NEEDS_REAUTHORIZATION, PROBE_UNAUTHORIZED, 401)
    if status == 403 and not rate_limited(response):
        return Verdict(NEEDS_REAUTHORIZATION, PROBE_FORBIDDEN, 403)
    return Verdict(UNKNOWN)
