"""The client side of OAuth 2 servers, for providers and sign-in issuers alike.

One POST to a token endpoint (RFC 6749 §3.2) and its answer read as §5 says: a JSON object with
``access_token``, or one with ``error``; and one GET of a server's metadata document (RFC 8414 §3,
OpenID Connect Discovery §4), which must name the issuer it was fetched for. What a server sends
back is hostile text: an error is reduced to a short code from a fixed alphabet
(``ProviderError.error``, ``MetadataFailed.reason``) and no exception message, which could echo a
code or a token, is logged. Requests go out on the process's one shared ``httpx.AsyncClient``
(``service.http``).
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


class MetadataFailed(Exception):
    """A metadata document was not usable. ``reason`` is ``unreachable``, ``http_status`` (with
    ``status``), ``not_json``, ``not_object`` or ``issuer_mismatch``; never the server's text."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _same_issuer(named: object, issuer: str, *, trailing_slash: bool) -> bool:
    if not isinstance(named, str):
        return False
    if trailing_slash:
        return named.rstrip("/") == issuer.rstrip("/")
    return named == issuer


async def fetch_metadata(
    http: httpx.AsyncClient, url: str, *, issuer: str, timeout: float, trailing_slash: bool = False
) -> dict[str, Any]:
    """The metadata document at ``url``, or ``MetadataFailed``. Its ``issuer`` must be ``issuer``
    character for character (RFC 8414 §3.3, OIDC Discovery §4.3): a document naming another server
    could point every later call at that server's endpoints. ``trailing_slash`` also takes one
    that differs only by a final ``/`` (how a provider's issuer was configured before). httpx's
    timeouts are per phase, so a server dripping its answer byte by byte would pass each of them:
    the whole call has ``timeout`` as one deadline too."""
    try:
        async with asyncio.timeout(timeout):
            response = await http.get(url, headers={"Accept": "application/json"}, timeout=timeout)
    except (httpx.HTTPError, TimeoutError) as exc:
        raise MetadataFailed("unreachable") from exc
    if response.status_code != 200:
        raise MetadataFailed("http_status", response.status_code)
    try:
        document = read_json(response)
    except ValueError:
        raise MetadataFailed("not_json") from None
    if not isinstance(document, dict):
        raise MetadataFailed("not_object")
    if not _same_issuer(document.get("issuer"), issuer, trailing_slash=trailing_slash):
        raise MetadataFailed("issuer_mismatch")
    return document
