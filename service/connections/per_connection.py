"""The provider as one connection talks to it: the catalog parameters its endpoints still hold
open (Shopify's shop, Zendesk's subdomain) filled with that connection's values, and its token
calls sent to the server its callback named (Zoho's accounts-server), each checked before use."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from service.connections.catalog import Parameter, fill_url, placeholders
from service.connections.discovery import DiscoveryFailed
from service.connections.providers import InvalidParameter, ResolvedProvider, checked_endpoint
from service.errors import ConfigurationError
from service.loopback import is_loopback_host

# ---- connection parameters and the token server ---------------------------------------------------
_TEMPLATED = ("authorization_endpoint", "token_endpoint", "revocation_endpoint", "account_endpoint")


def open_parameters(provider: ResolvedProvider) -> dict[str, Parameter]:
    """The catalog parameters this provider's endpoints still hold as placeholders: each
    connection supplies them (the MCP server in the flow request, or the person)."""
    urls = [getattr(provider, key) for key in _TEMPLATED] + [lookup.endpoint for lookup in provider.quirks.lookups]
    names = {name for url in urls if url for name in placeholders(url)}
    return {name: provider.quirks.parameters[name] for name in sorted(names) if name in provider.quirks.parameters}


def parameter_problems(provider: ResolvedProvider, values: Mapping[str, Any]) -> dict[str, str]:
    """Each open parameter's problem with ``values``: ``missing`` or ``pattern``; empty when all fit."""
    problems: dict[str, str] = {}
    for name, declared in open_parameters(provider).items():
        value = values.get(name)
        if not isinstance(value, str) or value == "":
            problems[name] = "missing"
        elif not declared.accepts(value):
            problems[name] = "pattern"
    return problems


def with_parameters(provider: ResolvedProvider, values: Mapping[str, Any]) -> ResolvedProvider:
    """The provider with its endpoints filled for one connection (``fill_url``: each value matches
    its pattern and the URL stays on the entry's host); ``InvalidParameter`` otherwise. A provider
    with nothing open is returned as it is."""
    wanted = open_parameters(provider)
    if not wanted:
        return provider
    problems = parameter_problems(provider, values)
    if problems:
        name = next(iter(problems))
        why = "required" if problems[name] == "missing" else "not valid"
        raise InvalidParameter(
            f"The connection parameter '{name}' ({wanted[name].title}) is {why}.",
            extra={"parameter": name},
        )
    given = {name: str(values[name]) for name in wanted}
    filled: dict[str, Any] = {}
    for key in _TEMPLATED:
        url = getattr(provider, key)
        try:
            filled[key] = checked_endpoint(fill_url(url, provider.quirks.parameters, given)) if url else None
        except (ConfigurationError, DiscoveryFailed):
            raise InvalidParameter("A connection parameter moves the provider's address elsewhere.") from None
    return dataclasses.replace(provider, **filled, parameters=given)


def token_server(provider: ResolvedProvider, named: Any) -> str | None:
    """The origin a callback names for the token calls (the entry's ``token_server``: Zoho's
    ``accounts-server``), when it is one of the entry's hosts exactly — https, or http on a
    loopback host in development — with no credentials, port, path, query or fragment. None
    otherwise: such a callback is refused before the code goes anywhere."""
    server = provider.quirks.token_server
    if server is None or not isinstance(named, str) or len(named) > 300:
        return None
    try:
        parts = urlsplit(named)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    loopback = parts.scheme == "http" and is_loopback_host(host)
    if (
        (parts.scheme != "https" and not loopback)
        or host not in server.hosts
        or parts.username is not None
        or parts.password is not None
        or (port is not None and not loopback)
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    return f"{parts.scheme}://{parts.netloc}"


def at_token_server(provider: ResolvedProvider, origin: str) -> ResolvedProvider:
    """The provider with its token, refresh and revocation calls sent to ``origin`` (a value
    ``token_server`` accepted), each endpoint's path kept."""

    def moved(url: str | None) -> str | None:
        if not url:
            return url
        at = urlsplit(url)
        to = urlsplit(origin)
        return urlunsplit((to.scheme, to.netloc, at.path, at.query, ""))

    quirks = provider.quirks
    if quirks.refresh_endpoint:
        quirks = dataclasses.replace(quirks, refresh_endpoint=moved(quirks.refresh_endpoint))
    return dataclasses.replace(
        provider,
        token_endpoint=moved(provider.token_endpoint) or provider.token_endpoint,
        revocation_endpoint=moved(provider.revocation_endpoint),
        quirks=quirks,
    )


def for_authorization(
    provider: ResolvedProvider, parameters: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None
) -> ResolvedProvider:
    """The provider as one stored authorization talks to it: its connection's parameters filled
    in, and its token calls at the server its callback named (re-checked: a row edited to name
    another host is not followed)."""
    found = with_parameters(provider, parameters or {})
    server = found.quirks.token_server
    if server is not None:
        origin = token_server(found, (metadata or {}).get(server.callback_param))
        if origin is not None:
            found = at_token_server(found, origin)
    return found
