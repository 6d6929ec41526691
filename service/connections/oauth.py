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
import dataclasses
import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from service.connections.catalog import CatalogEntry, TokenAnswer, dig, fill_url
from service.connections.providers import ResolvedProvider
from service.errors import ConfigurationError
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
    # Non-secret values kept beside the tokens (``metadata_of``): the catalog entry's token answer
    # metadata, its callback parameters and its lookups' values.
    metadata: dict[str, str] = field(default_factory=dict)


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
    """PKCE S256 always, whatever the provider advertises (a stolen code is useless without it),
    except for a provider whose catalog entry says it refuses PKCE: there a challenge makes the
    authorization fail. The client id travels under the entry's name for it (TikTok's
    ``client_key``)."""
    from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    params: dict[str, Any] = {k: str(v) for k, v in provider.authorize_params.items()}
    if scopes:
        # Slack asks for a token acting as the person with ``user_scope``.
        params[provider.quirks.scope_param] = provider.scope_separator.join(scopes)
    response_type = params.pop("response_type", "code")
    params.setdefault("redirect_uri", redirect_uri)
    if response_type == "code" and provider.quirks.pkce != "refused":
        params["code_challenge"] = create_s256_code_challenge(verifier)
        params["code_challenge_method"] = "S256"
    url = str(
        prepare_grant_uri(
            provider.authorization_endpoint,
            client_id=provider.client_id,
            response_type=response_type,
            state=state,
            **params,
        )
    )
    rename = provider.quirks.client_id_param
    if rename != "client_id":
        parts = urlsplit(url)
        query = [(rename if k == "client_id" else k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        url = urlunsplit(parts._replace(query=urlencode(query)))
    return url


def _client(provider: ResolvedProvider) -> ClientAuth:
    from authlib.oauth2.auth import ClientAuth

    return ClientAuth(provider.client_id, provider.client_secret, provider.token_auth_method)


def callback_signed(provider: ResolvedProvider, callback: Mapping[str, str]) -> bool:
    """Whether a signed callback (the entry's ``callback_hmac``, Shopify's) carries the HMAC the
    provider makes with the client secret over its other parameters; True when the entry signs
    nothing. Compared in constant time; a missing or malformed signature is a bad one."""
    name = provider.quirks.callback_hmac
    if name is None:
        return True
    given = callback.get(name)
    if not isinstance(given, str) or not provider.client_secret:
        return False
    message = "&".join(f"{k}={v}" for k, v in sorted(callback.items()) if k not in {name, "signature"})
    expected = hmac.new(provider.client_secret.encode(), message.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given.lower())


def _plain(quirks: CatalogEntry) -> bool:
    """Whether a provider's token calls are RFC 6749's to the letter (the shared client's path)."""
    return (
        quirks.client_id_param == "client_id"
        and quirks.token_body == "form"
        and quirks.token_answer == TokenAnswer()
        and not quirks.token_headers
        and not quirks.token_extra_params
        and quirks.token_accept in (None, "application/json")
    )


def _mapped(document: dict[str, Any], answer: TokenAnswer, separator: str) -> dict[str, Any]:
    """A token answer in RFC 6749 §5.1's flat shape, read where the entry says each value sits
    (Slack's user token under ``authed_user``); everything else is kept as it came. A value absent
    from its path is read from its RFC 6749 place (Slack answers a user token's refresh flat)."""
    token = dict(document)
    for name in ("access_token", "refresh_token", "expires_in", "scope"):
        path = getattr(answer, name)
        if path != name:
            found = dig(document, path)
            token[name] = found if found is not None else document.get(name)
    if isinstance(token.get("scope"), list):  # Twitch answers its scopes as a list
        token["scope"] = separator.join(str(s) for s in token["scope"])
    return token


def _answer_document(response: httpx.Response, answer: TokenAnswer) -> dict[str, Any]:
    """The answer's object: JSON, or a form (``access_token=…&scope=…``) where the entry says the
    provider answers so or the answer itself is one. Errors as RFC 6749 §5.2 reads them, from the
    entry's error field, reduced to a safe code."""
    if response.status_code >= 500:
        raise ProviderError(f"http_{response.status_code}", response.status_code)
    document: Any = None
    form = answer.format == "form" or response.headers.get("content-type", "").startswith(
        "application/x-www-form-urlencoded"
    )
    if form:
        document = dict(parse_qsl(response.text, keep_blank_values=True))
    else:
        try:
            document = read_json(response)
        except ValueError:
            document = None
    if not isinstance(document, dict) or not document:
        raise ProviderError(
            f"http_{response.status_code}" if not response.is_success else "provider_unreachable",
            response.status_code,
        )
    error = dig(document, answer.error)
    if error not in (None, "", False):
        raise ProviderError(safe_code(error), response.status_code)
    if not response.is_success:
        raise ProviderError(f"http_{response.status_code}", response.status_code)
    return document


async def _quirky_call(
    http: httpx.AsyncClient, provider: ResolvedProvider, endpoint: str, params: dict[str, str]
) -> dict[str, Any]:
    """A token call shaped by the provider's catalog entry: its name for the client id, extra
    parameters, a JSON body, its own headers, and its answer's shape. Same outcomes as the plain
    path: a token object, or ``ProviderError`` with a safe code."""
    quirks = provider.quirks
    params = {**{k: str(v) for k, v in quirks.token_extra_params.items()}, **params}
    headers = {"Accept": quirks.token_accept or "application/json", **quirks.token_headers}
    if quirks.client_id_param != "client_id":
        # The renamed id cannot ride on standard client authentication: both go in the body.
        params[quirks.client_id_param] = provider.client_id
        if provider.client_secret:
            params["client_secret"] = provider.client_secret
        url, body = endpoint, urlencode(params)
    else:
        headers["Content-Type"] = "application/x-www-form-urlencoded;charset=UTF-8"
        url, content, headers = authenticated(_client(provider), endpoint, urlencode(params), headers)
        body = content.decode()
    if quirks.token_body == "json":
        headers["Content-Type"] = "application/json"
        content_bytes = json.dumps(dict(parse_qsl(body, keep_blank_values=True))).encode()
    else:
        headers["Content-Type"] = "application/x-www-form-urlencoded;charset=UTF-8"
        content_bytes = body.encode()
    try:
        async with asyncio.timeout(CALL_DEADLINE_SECONDS):
            response = await http.post(url, content=content_bytes, headers=headers)
    except (httpx.HTTPError, TimeoutError) as exc:
        logger.warning("token call failed", extra={"provider": provider.name, "error_type": type(exc).__name__})
        raise ProviderError("provider_unreachable") from None
    document = _answer_document(response, quirks.token_answer)
    return _mapped(document, quirks.token_answer, provider.scope_separator)


# A value kept as metadata: a short scalar, never a token or a secret (the lint refuses such names
# in an entry; this holds for an entry loaded some other way too).
_SECRET_NAME = re.compile(r"token|secret|password|private|signing", re.IGNORECASE)
_METADATA_LENGTH = 512


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float) and value != "":
        return str(value)[:_METADATA_LENGTH]
    return None


def metadata_of(document: Any, named: Mapping[str, str]) -> dict[str, str]:
    """``{name: path}`` read from a provider's JSON answer: the scalars found, nothing secret."""
    kept: dict[str, str] = {}
    for name, path in named.items():
        value = _scalar(dig(document, path))
        if value is not None and not _SECRET_NAME.search(f"{name} {path}"):
            kept[name] = value
    return kept


def _token_set(token: dict[str, Any], answer: TokenAnswer | None = None) -> TokenSet:
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
        metadata=metadata_of(token, {path: path for path in answer.metadata}) if answer is not None else {},
    )


def _seconds(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


async def _token_call(
    http: httpx.AsyncClient, provider: ResolvedProvider, params: dict[str, str], *, endpoint: str | None = None
) -> dict[str, Any]:
    endpoint = endpoint or provider.token_endpoint
    if _plain(provider.quirks):
        from authlib.oauth2.rfc6749.parameters import prepare_token_request

        grant = params.pop("grant_type")
        body = prepare_token_request(grant, "", **params)
        return await token_request(http, endpoint, _client(provider), body, log={"provider": provider.name})
    return await _quirky_call(http, provider, endpoint, params)


async def exchange_code(
    http: httpx.AsyncClient,
    provider: ResolvedProvider,
    *,
    redirect_uri: str,
    code: str,
    verifier: str,
    callback: Mapping[str, str] | None = None,
) -> TokenSet:
    """The code for tokens. ``callback`` is the callback's query: the values the entry names in
    ``callback_params`` (QuickBooks' ``realmId``, Zoho's ``accounts-server``) join the token
    answer, where the account lookup finds them, and the authorization's metadata."""
    params = {"grant_type": "authorization_code", "redirect_uri": redirect_uri, "code": code}
    if provider.quirks.pkce != "refused":
        params["code_verifier"] = verifier
    token = await _token_call(http, provider, params)
    kept: dict[str, str] = {}
    for name in provider.quirks.callback_params:
        value = (callback or {}).get(name)
        if isinstance(value, str) and value:
            kept[name] = value[:255]
            token.setdefault(name, value[:255])
    tokens = _token_set(token, provider.quirks.token_answer)
    return dataclasses.replace(tokens, metadata={**kept, **tokens.metadata})


async def look_up(http: httpx.AsyncClient, provider: ResolvedProvider, tokens: TokenSet) -> TokenSet:
    """The entry's lookups made with the new access token (Xero's tenants, Atlassian's sites),
    their values joined to the tokens' metadata. A lookup that fails fails the connect
    (``account_lookup_failed``): without its tenant or site the connection cannot be used."""
    found: dict[str, str] = {}
    for lookup in provider.quirks.lookups:
        try:
            endpoint = fill_url(lookup.endpoint, provider.quirks.parameters, provider.parameters)
            async with asyncio.timeout(CALL_DEADLINE_SECONDS):
                response = await http.request(
                    lookup.method,
                    endpoint,
                    headers={
                        "Accept": "application/json",
                        **lookup.headers,
                        "Authorization": f"Bearer {tokens.access_token}",
                    },
                )
            document = read_json(response) if response.status_code == 200 else None
        except (httpx.HTTPError, TimeoutError, ValueError, ConfigurationError) as exc:
            logger.warning(
                "provider lookup failed", extra={"provider": provider.name, "error_type": type(exc).__name__}
            )
            raise ProviderError("account_lookup_failed") from None
        values = metadata_of(document, lookup.metadata)
        if document is None or not values:
            raise ProviderError("account_lookup_failed")
        found.update(values)
    return dataclasses.replace(tokens, metadata={**tokens.metadata, **found}) if found else tokens


async def refresh(http: httpx.AsyncClient, provider: ResolvedProvider, refresh_token: str) -> TokenSet:
    params = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    # Figma spends refresh tokens at an endpoint of their own.
    token = await _token_call(http, provider, params, endpoint=provider.quirks.refresh_endpoint)
    if not token.get("refresh_token"):
        # The provider keeps the refresh token (no rotation): it stays the one to use next time.
        token["refresh_token"] = refresh_token
    return _token_set(token, provider.quirks.token_answer)


async def fetch_account(
    http: httpx.AsyncClient, provider: ResolvedProvider, tokens: TokenSet
) -> tuple[str, str | None]:
    """The provider's id (and a readable login) for the account that granted the tokens."""
    document: Any = tokens.raw
    if provider.account_endpoint:
        try:
            async with asyncio.timeout(CALL_DEADLINE_SECONDS):
                response = await http.request(
                    provider.quirks.account_method,
                    provider.account_endpoint,
                    headers={
                        "Accept": "application/json",
                        **provider.quirks.account_headers,
                        "Authorization": f"Bearer {tokens.access_token}",
                    },
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
    rename = provider.quirks.client_id_param
    if rename != "client_id":
        # TikTok revokes with client_key and client_secret in the body, as its token calls.
        params = {**dict(parse_qsl(body)), rename: provider.client_id, "client_secret": provider.client_secret or ""}
        url, content = provider.revocation_endpoint, urlencode(params).encode()
        headers = {**headers, **provider.quirks.token_headers}
    else:
        url, content, headers = authenticated(_client(provider), provider.revocation_endpoint, body, headers)
        headers = {**headers, **provider.quirks.token_headers}
    try:
        async with asyncio.timeout(CALL_DEADLINE_SECONDS):
            response = await http.post(url, content=content, headers=headers)
    except (httpx.HTTPError, TimeoutError) as exc:
        logger.warning(
            "provider revocation failed", extra={"provider": provider.name, "error_type": type(exc).__name__}
        )
        return False
    return response.status_code == 200
