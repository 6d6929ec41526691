"""The client side of OAuth 2 token endpoints, for providers and sign-in issuers alike.

One POST to a token endpoint (RFC 6749 §3.2) and its answer read as §5 says: a JSON object with
``access_token``, or one with ``error``. What a server sends back is hostile text: an error is
reduced to a short code from a fixed alphabet (``ProviderError.error``) and no exception message,
which could echo a code or a token, is logged. The request goes out on the process's one shared
``httpx.AsyncClient`` (``service.http``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

import httpx

from service.http import TIMEOUT_SECONDS, read_json

if TYPE_CHECKING:
    from authlib.oauth2.auth import ClientAuth

logger = logging.getLogger("elicitd.connections.oauth")

# A call to a provider ends within this, whole (httpx's timeouts are per phase: a provider that
# trickles bytes could otherwise hold a call open longer). The refresh claim is sized from it.
CALL_DEADLINE_SECONDS = TIMEOUT_SECONDS
_CODE = re.compile(r"^[a-z0-9_]{1,48}$")
_TOKEN_HEADERS = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8"}


class ProviderError(Exception):
    """The provider refused or failed. ``error`` is a safe short code, never the provider's text."""

    def __init__(self, error: str, status: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        # The HTTP status of the answer, when there was one (connection health records it).
        self.status = status


def safe_code(value: Any, default: str = "provider_error") -> str:
    text = str(value or "").strip().lower()
    return text if _CODE.match(text) else default


def authenticated(
    client: ClientAuth, url: str, body: str, headers: dict[str, str]
) -> tuple[str, bytes, dict[str, str]]:
    """A client's authentication applied to a form POST (RFC 6749 §2.3.1)."""
    url, headers, body = client.prepare("POST", url, headers, body)
    return url, body.encode(), headers


def _token_answer(response: httpx.Response) -> dict[str, Any]:
    """RFC 6749 §5: a JSON object, either a token (§5.1) or an error (§5.2).

    A server error, or a non-JSON answer with an error status (a gateway's rate-limit page), is
    ``http_<status>``; a JSON ``error`` is its code; anything else unusable is unreachable."""
    if response.status_code >= 500:
        raise ProviderError(f"http_{response.status_code}", response.status_code)
    try:
        document = read_json(response)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        if not response.is_success:
            raise ProviderError(f"http_{response.status_code}", response.status_code)
        raise ProviderError("provider_unreachable")
    if "error" in document:
        raise ProviderError(safe_code(document.get("error")), response.status_code)
    return document


async def token_request(
    http: httpx.AsyncClient, token_endpoint: str, client: ClientAuth, body: str, *, log: dict[str, str]
) -> dict[str, Any]:
    """One POST to a token endpoint (RFC 6749 §3.2), for providers and sign-in issuers alike: the
    answer's JSON object, or ``ProviderError`` — ``provider_unreachable`` or ``http_<status>`` when
    the endpoint failed, the answer's own safe ``error`` code when it refused. ``log`` names the
    party in the warning a failure leaves."""
    url, content, headers = authenticated(client, token_endpoint, body, dict(_TOKEN_HEADERS))
    try:
        async with asyncio.timeout(CALL_DEADLINE_SECONDS):
            response = await http.post(url, content=content, headers=headers)
    except (httpx.HTTPError, TimeoutError) as exc:
        logger.warning("token call failed", extra={**log, "error_type": type(exc).__name__})
        raise ProviderError("provider_unreachable") from None
    try:
        return _token_answer(response)
    except ProviderError as exc:
        if exc.error == "provider_unreachable":
            logger.warning("token call failed", extra={**log, "error_type": "ValueError"})
        raise
