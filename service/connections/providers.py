"""Providers as data: create from the catalog, list, disable, and resolve for use.

A provider row holds only what differs from its catalog entry plus the client credentials; the
secret is vault-encrypted with the provider name as owner. ``resolve`` turns a row into a
``ResolvedProvider`` with endpoints filled from discovery where the row leaves them empty.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections.catalog import (
    CATALOG,
    PLACEHOLDER,
    CatalogEntry,
    fill_template,
    placeholders,
)
from service.connections.discovery import DiscoveryFailed, MetadataCache
from service.connections.models import Provider
from service.crypto.vault import Vault
from service.errors import ConfigurationError, InvalidRequest
from service.text import display_text_problem
from service.urls import is_https_or_loopback_http, url_problem

CLIENT_SECRET = "client_secret"
# A provider's fields that hold an address: each must be an https URL (http only on loopback).
ADDRESS_FIELDS = (
    "issuer",
    "discovery_url",
    "authorization_endpoint",
    "token_endpoint",
    "revocation_endpoint",
    "account_endpoint",
)


class UnknownProvider(InvalidRequest):
    code = "unknown_provider"
    title = "Unknown provider"


class InvalidParameter(InvalidRequest):
    """A connection parameter that is missing or does not match the catalog entry's pattern."""

    code = "invalid_parameter"
    title = "Invalid connection parameter"


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """What an operator gives (CLI, config file): a catalog key, credentials, optional overrides."""

    name: str
    client_id: str
    client_secret: str | None = None
    catalog: str | None = None
    display_name: str | None = None
    issuer: str | None = None
    discovery_url: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    account_endpoint: str | None = None
    account_id_field: str | None = None
    account_login_field: str | None = None
    token_auth_method: str | None = None
    default_scopes: tuple[str, ...] | None = None
    scope_descriptions: dict[str, str | dict[str, str]] | None = None
    scope_separator: str | None = None
    authorize_params: dict[str, Any] | None = None
    enabled: bool = True
    # Values the catalog entry's endpoints are templated from (``{subdomain}``, ``{host}``…), each
    # checked by the entry's pattern before any URL is built.
    parameters: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ResolvedProvider:
    """Everything needed to talk to a provider. Holds the client secret in memory only."""

    name: str
    display_name: str
    issuer: str | None
    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str | None
    account_endpoint: str | None
    account_id_field: str
    account_login_field: str | None
    client_id: str
    client_secret: str | None
    token_auth_method: str
    default_scopes: tuple[str, ...]
    scope_separator: str
    scope_descriptions: dict[str, Any]
    authorize_params: dict[str, Any]
    iss_parameter_supported: bool
    # The catalog entry's behaviour the row does not hold (token request and answer shape, PKCE,
    # callback parameters…): read from the in-memory catalog when the provider is resolved.
    quirks: CatalogEntry = CATALOG["oauth2"]
    # The connection parameters the endpoints were filled from (``with_parameters``); empty while
    # the provider is the operator's row alone.
    parameters: dict[str, str] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:  # the secret must not reach a log through a repr
        return f"ResolvedProvider(name={self.name!r})"


def _entry(spec: ProviderSpec) -> CatalogEntry:
    key = spec.catalog or (spec.name if spec.name in CATALOG else "oauth2")
    entry = CATALOG.get(key)
    if entry is None:
        raise ConfigurationError(
            f"provider '{spec.name}': unknown catalog entry '{key}' (known: {', '.join(sorted(CATALOG))})"
        )
    if entry.auth_mode == "api_key":
        raise ConfigurationError(f"provider '{spec.name}': '{key}' is an API key service, not an OAuth provider")
    return entry


def _templated(spec: ProviderSpec, entry: CatalogEntry) -> dict[str, str | None]:
    """The entry's endpoints with its ``{parameters}`` filled from the spec (each value checked by
    its pattern first); an entry without parameters passes through as it is."""
    given = dict(spec.parameters or {})
    unknown = set(given) - set(entry.parameters)
    if unknown:
        raise ConfigurationError(f"provider '{spec.name}': unknown parameters {', '.join(sorted(unknown))}")
    values: dict[str, str | None] = {}
    for key in ("issuer", "authorization_endpoint", "token_endpoint", "revocation_endpoint", "account_endpoint"):
        template = getattr(entry, key)
        try:
            # A parameter the operator leaves open is each connection's own (``with_parameters``),
            # except in an issuer: its metadata is discovered for the provider, not per connection.
            open_ok = key != "issuer"
            values[key] = fill_template(template, entry.parameters, given, leave_open=open_ok) if template else None
        except ConfigurationError as exc:
            raise ConfigurationError(f"provider '{spec.name}': {exc}") from None
    return values


def spec_values(spec: ProviderSpec, vault: Vault) -> dict[str, Any]:
    """Merge catalog defaults with the spec; check the result can be used; encrypt the secret."""
    entry = _entry(spec)
    templated = _templated(spec, entry)
    issuer = spec.issuer or templated.get("issuer")
    values: dict[str, Any] = {
        "name": spec.name,
        "display_name": spec.display_name or entry.display_name,
        "catalog": entry.key,
        "issuer": issuer.rstrip("/") if issuer else None,
        "discovery_url": spec.discovery_url,
        "authorization_endpoint": spec.authorization_endpoint or templated.get("authorization_endpoint"),
        "token_endpoint": spec.token_endpoint or templated.get("token_endpoint"),
        "revocation_endpoint": spec.revocation_endpoint or templated.get("revocation_endpoint"),
        "account_endpoint": spec.account_endpoint or templated.get("account_endpoint"),
        "account_id_field": spec.account_id_field or entry.account_id_field,
        "account_login_field": spec.account_login_field or entry.account_login_field,
        "client_id": spec.client_id,
        "token_auth_method": spec.token_auth_method or entry.token_auth_method,
        "default_scopes": list(spec.default_scopes if spec.default_scopes is not None else entry.default_scopes),
        "scope_descriptions": {**entry.scope_descriptions, **(spec.scope_descriptions or {})},
        "scope_separator": spec.scope_separator or entry.scope_separator,
        "authorize_params": {**entry.authorize_params, **(spec.authorize_params or {})},
        "enabled": spec.enabled,
    }
    if (
        not spec.name
        or len(spec.name) > 64
        or not all(c.isalnum() or c in "_.-" for c in spec.name)
        or spec.name != spec.name.lower()
    ):
        raise ConfigurationError(f"provider name '{spec.name}' must be lowercase letters, digits, '_', '.', '-'")
    if not spec.client_id:
        raise ConfigurationError(f"provider '{spec.name}': client id is required")
    if not issuer and not (values["authorization_endpoint"] and values["token_endpoint"]):
        raise ConfigurationError(
            f"provider '{spec.name}': give an issuer (for discovery) or both the authorization and token endpoints"
        )
    texts = [("display_name", values["display_name"])] + [
        ("scope_descriptions", text)
        for words in values["scope_descriptions"].values()
        for text in ([words] if isinstance(words, str) else words.values() if isinstance(words, dict) else [])
    ]
    for field, value in texts:
        if (problem := display_text_problem(value, field)) is not None:
            raise ConfigurationError(f"provider '{spec.name}': {problem}")
    separator = values["scope_separator"]
    if separator.strip() and any(separator in scope for scope in values["default_scopes"]):
        raise ConfigurationError(f"provider '{spec.name}': a default scope contains the scope separator")
    if values["token_auth_method"] not in {"client_secret_basic", "client_secret_post", "none"}:
        raise ConfigurationError(
            f"provider '{spec.name}': token auth method must be client_secret_basic, client_secret_post or none"
        )
    if values["token_auth_method"] != "none" and not spec.client_secret:
        raise ConfigurationError(f"provider '{spec.name}': a client secret is required")
    for key in ADDRESS_FIELDS:
        # A placeholder left for each connection is checked with its example in its place.
        url = _sampled(values[key], entry)
        if url and not is_https_or_loopback_http(url):
            raise ConfigurationError(f"provider '{spec.name}': {key} must be an https URL")
    if spec.client_secret:
        key_id, blob = vault.encrypt(spec.client_secret, owner=spec.name, purpose=CLIENT_SECRET)
        values["client_secret_key_id"], values["client_secret_enc"] = key_id, blob
    else:
        values["client_secret_key_id"], values["client_secret_enc"] = None, None
    return values


def _sampled(url: str | None, entry: CatalogEntry) -> str | None:
    def sample(match: re.Match[str]) -> str:
        parameter = entry.parameters.get(match.group(1))
        return (parameter.example or "x") if parameter is not None else match.group(0)

    return PLACEHOLDER.sub(sample, url) if url else url


async def upsert_provider(session: AsyncSession, spec: ProviderSpec, vault: Vault) -> Provider:
    """Create or replace a provider in one statement (the config file is applied on every start)."""
    values = spec_values(spec, vault)
    insert_stmt = insert(Provider).values(**values)
    changed: dict[str, Any] = {k: insert_stmt.excluded[k] for k in values if k != "name"}
    changed["updated_at"] = text("now()")
    upsert = insert_stmt.on_conflict_do_update(index_elements=[Provider.name], set_=changed).returning(Provider)
    result = await session.execute(upsert.execution_options(populate_existing=True))
    row: Provider = result.scalar_one()
    return row


async def get_provider(session: AsyncSession, name: str) -> Provider | None:
    return (await session.execute(select(Provider).where(Provider.name == name))).scalar_one_or_none()


async def list_providers(session: AsyncSession) -> list[Provider]:
    return list((await session.execute(select(Provider).order_by(Provider.name))).scalars())


async def set_enabled(session: AsyncSession, name: str, enabled: bool) -> bool:
    result = await session.execute(
        update(Provider)
        .where(Provider.name == name)
        .values(enabled=enabled, updated_at=text("now()"))
        .returning(Provider.name)
    )
    return result.scalar_one_or_none() is not None


def public_view(row: Provider) -> dict[str, Any]:
    """What an operator may see: never the secret, only whether one is set."""
    return {
        "name": row.name,
        "display_name": row.display_name,
        "catalog": row.catalog,
        "issuer": row.issuer,
        "client_id": row.client_id,
        "has_client_secret": row.client_secret_enc is not None,
        "default_scopes": list(row.default_scopes or []),
        "enabled": row.enabled,
        "revocation": bool(row.revocation_endpoint) or None,
    }


def checked_endpoint(value: Any, *, templated: bool = False) -> str | None:
    """A configured or discovered endpoint, held to the URL rule (``service.urls``): discovery
    answers are the provider's word, and the client secret, the code and the PKCE verifier go to
    these addresses, so an http or malformed one stops the flow before anything is sent."""
    if value is None or value == "":
        return None
    if templated and isinstance(value, str) and placeholders(value):
        # An operator's row keeps the connection's placeholders: checked once filled.
        return value
    if not isinstance(value, str) or url_problem(value) is not None:
        raise DiscoveryFailed("The provider names an endpoint elicitd does not call (https only, well-formed).")
    return value


async def resolve(row: Provider, vault: Vault, metadata: MetadataCache) -> ResolvedProvider:
    document: dict[str, Any] = {}
    explicit = row.authorization_endpoint and row.token_endpoint
    if row.issuer and (not explicit or row.discovery_url or row.catalog == "oidc"):
        document = await metadata.get(row.issuer, row.discovery_url)
    elif row.issuer and explicit:
        # Explicit endpoints win, but the metadata still says whether ``iss`` is sent (RFC 9207).
        try:
            document = await metadata.get(row.issuer, row.discovery_url)
        except DiscoveryFailed:
            document = {}
    authorization = checked_endpoint(
        row.authorization_endpoint or document.get("authorization_endpoint"), templated=bool(row.authorization_endpoint)
    )
    token = checked_endpoint(row.token_endpoint or document.get("token_endpoint"), templated=bool(row.token_endpoint))
    if not authorization or not token:
        raise DiscoveryFailed("The provider has no authorization or token endpoint.")
    account = checked_endpoint(
        row.account_endpoint or (document.get("userinfo_endpoint") if row.catalog == "oidc" else None),
        templated=bool(row.account_endpoint),
    )
    revocation = checked_endpoint(
        row.revocation_endpoint or document.get("revocation_endpoint"), templated=bool(row.revocation_endpoint)
    )
    secret = vault.open_stored(row.client_secret_key_id, row.client_secret_enc, owner=row.name, purpose=CLIENT_SECRET)
    return ResolvedProvider(
        name=row.name,
        display_name=row.display_name,
        # The identifier the provider itself publishes (discovery already checked it names the
        # configured issuer): RFC 9207's ``iss`` must equal it exactly.
        issuer=document["issuer"] if isinstance(document.get("issuer"), str) else row.issuer,
        authorization_endpoint=str(authorization),
        token_endpoint=str(token),
        revocation_endpoint=revocation,
        account_endpoint=account,
        account_id_field=row.account_id_field,
        account_login_field=row.account_login_field,
        client_id=row.client_id,
        client_secret=secret,
        token_auth_method=row.token_auth_method,
        default_scopes=tuple(row.default_scopes or ()),
        scope_separator=row.scope_separator,
        scope_descriptions=dict(row.scope_descriptions or {}),
        authorize_params=dict(row.authorize_params or {}),
        iss_parameter_supported=bool(document.get("authorization_response_iss_parameter_supported")),
        quirks=CATALOG.get(row.catalog or "") or CATALOG["oauth2"],
    )


def spec_from_mapping(name: str, raw: Mapping[str, Any], env: Mapping[str, str]) -> ProviderSpec:
    """One ``providers`` entry of the config file. The secret comes from ``client_secret_env``
    (an environment variable's name), so the file itself can be committed."""
    known = (set(ProviderSpec.__dataclass_fields__) | {"client_secret_env"}) - {"client_secret"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigurationError(
            f"provider '{name}': unknown keys {', '.join(sorted(unknown))} (give the secret as client_secret_env)"
        )
    data = dict(raw)
    env_name = data.pop("client_secret_env", None)
    if env_name:
        if env_name not in env:
            raise ConfigurationError(f"provider '{name}': environment variable {env_name} is not set")
        data["client_secret"] = env[env_name]
    if data.get("default_scopes") is not None:
        data["default_scopes"] = tuple(str(s) for s in data["default_scopes"])
    data["name"] = name
    if not data.get("client_id"):
        raise ConfigurationError(f"provider '{name}': client_id is required")
    return ProviderSpec(**data)


async def apply_config_section(session: AsyncSession, vault: Vault, raw: Any, env: Mapping[str, str]) -> int:
    """``providers`` of ``ELICITD_CONFIG_FILE``: a list of tables with ``name``, or a table by name."""
    if isinstance(raw, dict):
        entries = [(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = []
        for item in raw:
            if not isinstance(item, dict) or not item.get("name"):
                raise ConfigurationError("providers: every entry needs a 'name'")
            entries.append((str(item["name"]), {k: v for k, v in item.items() if k != "name"}))
    else:
        raise ConfigurationError("providers: expected a list of tables or a table of providers")
    for name, body in entries:
        if not isinstance(body, dict):
            raise ConfigurationError(f"provider '{name}': expected a table")
        await upsert_provider(session, spec_from_mapping(name, body, env), vault)
    return len(entries)
