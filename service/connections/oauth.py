"""Talking OAuth 2 to providers, through Authlib's ``AsyncOAuth2Client``.

Everything a provider sends back is treated as hostile text: errors are reduced to a short code
from a fixed alphabet, exception messages are never logged or shown (they can echo a code or a
token), and token responses live only in ``TokenSet`` objects whose ``repr`` hides them.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError

from service.connections.catalog import dig
from service.connections.providers import ResolvedProvider

try:  # Authlib talks through httpx2 when it is installed, else httpx.
    import httpx2 as _http
except ImportError:  # pragma: no cover
    import httpx as _http  # type: ignore[no-redef]

logger = logging.getLogger("elicitd.connections.oauth")

TIMEOUT_SECONDS = 15.0
_CODE = re.compile(r"^[a-z0-9_]{1,48}$")


class ProviderError(Exception):
    """The provider refused or failed. ``error`` is a safe short code, never the provider's text."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def safe_code(value: Any, default: str = "provider_error") -> str:
    text = str(value or "").strip().lower()
    return text if _CODE.match(text) else default


@dataclass(frozen=True, slots=True)
class TokenSet:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    token_type: str
    expires_in: int | None
    scope: str | None
    raw: dict[str, Any] = field(repr=False)


def new_state() -> str:
    return secrets.token_urlsafe(32)


def new_verifier() -> str:
    return secrets.token_urlsafe(64)  # 86 characters: inside RFC 7636's 43..128


def _client(provider: ResolvedProvider, redirect_uri: str | None = None) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        token_endpoint_auth_method=provider.token_auth_method,
        revocation_endpoint_auth_method=provider.token_auth_method,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        timeout=TIMEOUT_SECONDS,
        follow_redirects=False,
    )


def authorization_url(
    provider: ResolvedProvider, *, redirect_uri: str, scopes: list[str], state: str, verifier: str
) -> str:
    """PKCE S256 always, whatever the provider advertises: a stolen code is useless without it."""
    client = _client(provider, redirect_uri)
    extra = {k: str(v) for k, v in provider.authorize_params.items()}
    if scopes:
        extra["scope"] = provider.scope_separator.join(scopes)
    url, _ = client.create_authorization_url(
        provider.authorization_endpoint, state=state, code_verifier=verifier, **extra
    )
    return str(url)


def _token_set(token: dict[str, Any]) -> TokenSet:
    access = token.get("access_token")
    if not isinstance(access, str) or not access:
        raise ProviderError("no_access_token")
    refresh = token.get("refresh_token")
    expires_in = token.get("expires_in")
    try:
        expires = int(expires_in) if expires_in is not None else None
    except (TypeError, ValueError):
        expires = None
    scope = token.get("scope")
    return TokenSet(
        access_token=access,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        token_type=str(token.get("token_type") or "Bearer")[:32],
        expires_in=expires,
        scope=scope if isinstance(scope, str) else None,
        raw=dict(token),
    )


async def _token_call(provider: ResolvedProvider, redirect_uri: str | None, **kwargs: Any) -> TokenSet:
    async with _client(provider, redirect_uri) as client:
        try:
            if "refresh_token" in kwargs:
                token = await client.refresh_token(provider.token_endpoint, refresh_token=kwargs["refresh_token"])
            else:
                token = await client.fetch_token(provider.token_endpoint, grant_type="authorization_code", **kwargs)
        except OAuthError as exc:
            raise ProviderError(safe_code(exc.error)) from None
        except _http.HTTPStatusError as exc:
            raise ProviderError(f"http_{exc.response.status_code}") from None
        except (_http.HTTPError, ValueError) as exc:
            logger.warning(
                "provider token call failed", extra={"provider": provider.name, "error_type": type(exc).__name__}
            )
            raise ProviderError("provider_unreachable") from None
    if isinstance(token, dict) and "error" in token:
        raise ProviderError(safe_code(token.get("error")))
    return _token_set(dict(token))


async def exchange_code(provider: ResolvedProvider, *, redirect_uri: str, code: str, verifier: str) -> TokenSet:
    return await _token_call(provider, redirect_uri, code=code, code_verifier=verifier)


async def refresh(provider: ResolvedProvider, refresh_token: str) -> TokenSet:
    return await _token_call(provider, None, refresh_token=refresh_token)


async def fetch_account(provider: ResolvedProvider, tokens: TokenSet) -> tuple[str, str | None]:
    """The provider's id (and a readable login) for the account that granted the tokens."""
    document: Any = tokens.raw
    if provider.account_endpoint:
        async with _http.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as http:
            try:
                response = await http.get(
                    provider.account_endpoint,
                    headers={"Authorization": f"Bearer {tokens.access_token}", "Accept": "application/json"},
                )
            except _http.HTTPError as exc:
                logger.warning(
                    "provider account lookup failed",
                    extra={"provider": provider.name, "error_type": type(exc).__name__},
                )
                raise ProviderError("account_lookup_failed") from None
        if response.status_code != 200:
            raise ProviderError("account_lookup_failed")
        try:
            document = response.json()
        except ValueError:
            raise ProviderError("account_lookup_failed") from None
    account = dig(document, provider.account_id_field)
    login = dig(document, provider.account_login_field) if provider.account_login_field else None
    account_id = "" if account is None or isinstance(account, dict | list) else str(account)[:255]
    return account_id, (None if login is None or isinstance(login, dict | list) else str(login)[:255])


async def revoke(provider: ResolvedProvider, token: str, hint: str) -> bool:
    """RFC 7009. False when the provider has no endpoint or the call failed (local revocation
    happens anyway; a provider that cannot be reached must not keep a user connected here)."""
    if not provider.revocation_endpoint:
        return False
    async with _client(provider) as client:
        try:
            response = await client.revoke_token(provider.revocation_endpoint, token=token, token_type_hint=hint)
        except (_http.HTTPError, OAuthError) as exc:
            logger.warning(
                "provider revocation failed", extra={"provider": provider.name, "error_type": type(exc).__name__}
            )
            return False
    return bool(response.status_code == 200)
