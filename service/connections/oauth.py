"""Talking OAuth 2 to providers, over the process's one shared HTTP client.

Authlib supplies the protocol pieces that are easy to get subtly wrong — the authorization URL
with its PKCE S256 challenge (RFC 7636), the token and revocation request bodies (RFC 6749 §4.1.3,
§6; RFC 7009 §2.1) and client authentication (``client_secret_basic``, ``client_secret_post``,
``none``). The requests themselves go out on the ``httpx.AsyncClient`` that ``build_services``
made: Authlib's own HTTP integration would build a client (and a TLS context) per call, tens of
milliseconds of CPU that every request parked on the event loop pays. Answers are parsed here as
RFC 6749 §5 says: a JSON object with ``access_token``, or one with ``error``.

Everything a provider sends back is treated as hostile text: errors are reduced to a short code
from a fixed alphabet, exception messages are never logged or shown (they can echo a code or a
token), and token responses live only in ``TokenSet`` objects whose ``repr`` hides them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from service.connections.catalog import dig
from service.connections.providers import ResolvedProvider
from service.http import read_json
from service.oauth_client import CALL_DEADLINE_SECONDS, ProviderError, authenticated, safe_code, token_request

__all__ = ["CALL_DEADLINE_SECONDS", "ProviderError", "TokenSet", "safe_code", "token_request"]

# Authlib is imported by the calls that use it: a process that never connects anyone never loads
# it (with joserfc, ~3.4 MB of an idle server's RSS before this).
if TYPE_CHECKING:
    from authlib.oauth2.auth import ClientAuth

logger = logging.getLogger("elicitd.connections.oauth")


@dataclass(frozen=True, slots=True)
class TokenSet:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    token_type: str
    expires_in: int | None
    scope: str | None
    raw: dict[str, Any] = field(repr=False)
    # How long the refresh token itself lasts, when the provider says (GitHub's
    # ``refresh_token_expires_in``); None when it does not.
    refresh_expires_in: int | None = None


def new_state() -> str:
    return secrets.token_urlsafe(32)


def new_verifier() -> str:
    return secrets.token_urlsafe(64)  # 86 characters: inside RFC 7636's 43..128


def split_scopes(value: str, separator: str) -> list[str]:
    """A ``scope`` string as the provider writes it (its ``scope_separator``: a space by RFC 6749,
    a comma for Slack or Linear), sorted and without duplicates. The one way every answer of a
    provider (code exchange and refresh alike) is read."""
    parts = value.split(separator) if separator.strip() else value.split()
    return sorted({part.strip() for part in parts if part.strip()})


def authorization_url(
    provider: ResolvedProvider, *, redirect_uri: str, scopes: list[str], state: str, verifier: str
) -> str:
    """PKCE S256 always, whatever the provider advertises: a stolen code is useless without it."""
    from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    params: dict[str, Any] = {k: str(v) for k, v in provider.authorize_params.items()}
    if scopes:
        params["scope"] = provider.scope_separator.join(scopes)
    response_type = params.pop("response_type", "code")
    params.setdefault("redirect_uri", redirect_uri)
    if response_type == "code":
        params["code_challenge"] = create_s256_code_challenge(verifier)
        params["code_challenge_method"] = "S256"
    url = prepare_grant_uri(
        provider.authorization_endpoint,
        client_id=provider.client_id,
        response_type=response_type,
        state=state,
        **params,
    )
    return str(url)


def _client(provider: ResolvedProvider) -> ClientAuth:
    from authlib.oauth2.auth import ClientAuth

    return ClientAuth(provider.client_id, provider.client_secret, provider.token_auth_method)


def _token_set(token: dict[str, Any]) -> TokenSet:
    access = token.get("access_token")
    if not isinstance(access, str) or not access:
        raise ProviderError("no_access_token")
    refresh = token.get("refresh_token")
    expires = _seconds(token.get("expires_in"))
    scope = token.get("scope")
    return TokenSet(
        access_token=access,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        token_type=str(token.get("token_type") or "Bearer")[:32],
        expires_in=expires,
        scope=scope if isinstance(scope, str) else None,
        raw=dict(token),
        refresh_expires_in=_seconds(token.get("refresh_token_expires_in")),
    )


def _seconds(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


async def _token_call(http: httpx.AsyncClient, provider: ResolvedProvider, body: str) -> dict[str, Any]:
    return await token_request(http, provider.token_endpoint, _client(provider), body, log={"provider": provider.name})


async def exchange_code(
    http: httpx.AsyncClient, provider: ResolvedProvider, *, redirect_uri: str, code: str, verifier: str
) -> TokenSet:
    from authlib.oauth2.rfc6749.parameters import prepare_token_request

    body = prepare_token_request("authorization_code", "", redirect_uri=redirect_uri, code=code, code_verifier=verifier)
    return _token_set(await _token_call(http, provider, body))


async def refresh(http: httpx.AsyncClient, provider: ResolvedProvider, refresh_token: str) -> TokenSet:
    from authlib.oauth2.rfc6749.parameters import prepare_token_request

    body = prepare_token_request("refresh_token", "", refresh_token=refresh_token)
    token = await _token_call(http, provider, body)
    if "refresh_token" not in token:
        # The provider keeps the refresh token (no rotation): it stays the one to use next time.
        token["refresh_token"] = refresh_token
    return _token_set(token)


async def fetch_account(
    http: httpx.AsyncClient, provider: ResolvedProvider, tokens: TokenSet
) -> tuple[str, str | None]:
    """The provider's id (and a readable login) for the account that granted the tokens."""
    document: Any = tokens.raw
    if provider.account_endpoint:
        try:
            async with asyncio.timeout(CALL_DEADLINE_SECONDS):
                response = await http.get(
                    provider.account_endpoint,
                    headers={"Authorization": f"Bearer {tokens.access_token}", "Accept": "application/json"},
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            logger.warning(
                "provider account lookup failed",
                extra={"provider": provider.name, "error_type": type(exc).__name__},
            )
            raise ProviderError("account_lookup_failed") from None
        if response.status_code != 200:
            raise ProviderError("account_lookup_failed")
        try:
            document = read_json(response)
        except ValueError:
            raise ProviderError("account_lookup_failed") from None
        if not isinstance(document, dict) or dig(document, provider.account_id_field) in (None, ""):
            # The endpoint is there to name the account: an answer that names none is garbage.
            raise ProviderError("account_lookup_failed")
    account = dig(document, provider.account_id_field)
    login = dig(document, provider.account_login_field) if provider.account_login_field else None
    account_id = "" if account is None or isinstance(account, dict | list) else str(account)[:255]
    return account_id, (None if login is None or isinstance(login, dict | list) else str(login)[:255])


async def revoke(http: httpx.AsyncClient, provider: ResolvedProvider, token: str, hint: str) -> bool:
    """RFC 7009. False when the provider has no endpoint or the call failed (local revocation
    happens anyway; a provider that cannot be reached must not keep a user connected here)."""
    if not provider.revocation_endpoint:
        return False
    from authlib.oauth2.rfc7009 import prepare_revoke_token_request

    body, headers = prepare_revoke_token_request(token, hint, "", {})
    url, content, headers = authenticated(_client(provider), provider.revocation_endpoint, body, headers)
    try:
        async with asyncio.timeout(CALL_DEADLINE_SECONDS):
            response = await http.post(url, content=content, headers=headers)
    except (httpx.HTTPError, TimeoutError) as exc:
        logger.warning(
            "provider revocation failed", extra={"provider": provider.name, "error_type": type(exc).__name__}
        )
        return False
    return response.status_code == 200
