"""Providers and issuers for operators: create, update, enable/disable, show, test discovery.

Built on the domains' own functions (``spec_values``/``upsert_provider``, ``upsert_issuer``,
``MetadataCache``, ``IssuerDirectory.discover``) so the API, the CLI, the console and the config
file validate alike (``directory_actions`` runs them for the API and the console). Client
secrets are write-only: they go straight into the vault and every view says only
``client_secret_set``. An update that does not mention the secret keeps it (it is decrypted in
memory and sealed again under the current key). Create refuses an existing name or URL (409);
update locks the row (``FOR UPDATE``) so two concurrent patches apply one after the other.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Any

import httpx
import msgspec
from msgspec import UNSET, Meta, UnsetType
from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admin.views import columns
from service.connections import providers
from service.connections.discovery import DiscoveryFailed, MetadataCache
from service.connections.models import Provider
from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.errors import ConfigurationError, Conflict, InvalidRequest, IssuerNotFound, ProviderNotFound
from service.flows.schemas import ProviderName
from service.identity import issuers
from service.identity.models import Issuer

Url = Annotated[str, Meta(min_length=1, max_length=2000, pattern=r"^\S+$")]
Secret = Annotated[str, Meta(min_length=1, max_length=4000)]
Text = Annotated[str, Meta(min_length=1, max_length=200)]
# Plain words for a scope: one text, or one per language (``{"en": "…", "th": "…"}``, BCP 47 tags).
ScopeWords = Text | dict[Annotated[str, Meta(pattern=r"^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$")], Text]
Field = Annotated[str, Meta(min_length=1, max_length=64)]
Scopes = Annotated[list[Annotated[str, Meta(min_length=1, max_length=200)]], Meta(max_length=100)]
AuthMethod = Annotated[str, Meta(pattern=r"^(client_secret_basic|client_secret_post|none)$")]


class InvalidProvider(InvalidRequest):
    code = "invalid_provider"


class ProviderExists(Conflict):
    code = "provider_exists"


class IssuerExists(Conflict):
    code = "issuer_exists"


# ---- wire shapes ------------------------------------------------------------------------------------
class ProviderView(msgspec.Struct):
    name: str
    display_name: str
    catalog: str | None
    issuer: str | None
    discovery_url: str | None
    authorization_endpoint: str | None
    token_endpoint: str | None
    revocation_endpoint: str | None
    account_endpoint: str | None
    client_id: str
    client_secret_set: bool
    token_auth_method: str
    default_scopes: list[str]
    enabled: bool
    created_at: datetime
    updated_at: datetime


class CreateProvider(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A catalog key (``github``, ``google``, ``oidc``, ``oauth2``…) plus credentials and overrides."""

    name: ProviderName
    client_id: Annotated[str, Meta(min_length=1, max_length=500)]
    client_secret: Secret | None = None
    catalog: Field | None = None
    display_name: Text | None = None
    issuer: Url | None = None
    discovery_url: Url | None = None
    authorization_endpoint: Url | None = None
    token_endpoint: Url | None = None
    revocation_endpoint: Url | None = None
    account_endpoint: Url | None = None
    account_id_field: Field | None = None
    account_login_field: Field | None = None
    token_auth_method: AuthMethod | None = None
    default_scopes: Scopes | None = None
    scope_descriptions: dict[str, ScopeWords] | None = None
    scope_separator: Annotated[str, Meta(min_length=1, max_length=4)] | None = None
    authorize_params: dict[str, str] | None = None
    enabled: bool = True


class UpdateProvider(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Only the fields present change; ``null`` clears an optional one (``client_secret: null``
    makes a public client)."""

    client_id: Annotated[str, Meta(min_length=1, max_length=500)] | UnsetType = UNSET
    client_secret: Secret | UnsetType | None = UNSET
    display_name: Text | UnsetType = UNSET
    issuer: Url | UnsetType | None = UNSET
    discovery_url: Url | UnsetType | None = UNSET
    authorization_endpoint: Url | UnsetType | None = UNSET
    token_endpoint: Url | UnsetType | None = UNSET
    revocation_endpoint: Url | UnsetType | None = UNSET
    account_endpoint: Url | UnsetType | None = UNSET
    account_id_field: Field | UnsetType = UNSET
    account_login_field: Field | UnsetType | None = UNSET
    token_auth_method: AuthMethod | UnsetType = UNSET
    default_scopes: Scopes | UnsetType = UNSET
    scope_descriptions: dict[str, ScopeWords] | UnsetType = UNSET
    authorize_params: dict[str, str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class DiscoveryReport(msgspec.Struct):
    """What a login or connect would use now: endpoints after discovery, and where they came from."""

    ok: bool
    discovered: bool
    error_code: str | None = None
    error: str | None = None
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    account_endpoint: str | None = None
    jwks_uri: str | None = None
    iss_parameter_supported: bool | None = None


class IssuerView(msgspec.Struct):
    issuer: str
    display_name: str
    client_id: str
    client_secret_set: bool
    scopes: list[str]
    authorization_endpoint: str | None
    token_endpoint: str | None
    jwks_uri: str | None
    enabled: bool
    introspection_endpoint: str | None
    introspection_client_id: str | None
    introspection_secret_set: bool
    metadata_fetched_at: datetime | None
    created_at: datetime
    updated_at: datetime


class CreateIssuer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    issuer: Url
    client_id: Annotated[str, Meta(min_length=1, max_length=500)]
    client_secret: Secret | None = None
    display_name: Text | None = None
    scopes: Scopes = msgspec.field(default_factory=lambda: ["openid"])
    authorization_endpoint: Url | None = None
    token_endpoint: Url | None = None
    jwks_uri: Url | None = None
    enabled: bool = True
    introspection_endpoint: Url | None = None
    introspection_client_id: Annotated[str, Meta(min_length=1, max_length=500)] | None = None
    introspection_client_secret: Secret | None = None


class UpdateIssuer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``issuer`` names the row (it is the identity, not changeable); other fields as for providers."""

    issuer: Url
    client_id: Annotated[str, Meta(min_length=1, max_length=500)] | UnsetType = UNSET
    client_secret: Secret | UnsetType | None = UNSET
    display_name: Text | UnsetType = UNSET
    scopes: Scopes | UnsetType = UNSET
    authorization_endpoint: Url | UnsetType | None = UNSET
    token_endpoint: Url | UnsetType | None = UNSET
    jwks_uri: Url | UnsetType | None = UNSET
    enabled: bool | UnsetType = UNSET
    introspection_endpoint: Url | UnsetType | None = UNSET
    introspection_client_id: Annotated[str, Meta(min_length=1, max_length=500)] | UnsetType | None = UNSET
    introspection_client_secret: Secret | UnsetType | None = UNSET


def provider_view(row: Provider) -> ProviderView:
    return columns(
        ProviderView,
        row,
        client_secret_set=row.client_secret_enc is not None,
        default_scopes=list(row.default_scopes or []),
    )


def issuer_view(row: Issuer) -> IssuerView:
    return columns(
        IssuerView,
        row,
        client_secret_set=row.client_secret_enc is not None,
        scopes=list(row.scopes or []),
        introspection_secret_set=row.introspection_secret_enc is not None,
    )


def _fields(data: msgspec.Struct) -> dict[str, Any]:
    return {k: v for k, v in msgspec.structs.asdict(data).items() if v is not UNSET}


# ---- providers ---------------------------------------------------------------------------------------
def _spec(values: dict[str, Any]) -> providers.ProviderSpec:
    if values.get("default_scopes") is not None:
        values["default_scopes"] = tuple(values["default_scopes"])
    return providers.ProviderSpec(**values)


def _checked(spec: providers.ProviderSpec, vault: Vault) -> dict[str, Any]:
    try:
        return providers.spec_values(spec, vault)
    except ConfigurationError as exc:  # the config file's wording, answered as a 400
        raise InvalidProvider(exc.detail) from None


async def get_provider(session: AsyncSession, name: str, *, lock: bool = False) -> Provider:
    stmt = select(Provider).where(Provider.name == name).execution_options(populate_existing=True)
    row = (await session.execute(stmt.with_for_update() if lock else stmt)).scalar_one_or_none()
    if row is None:
        raise ProviderNotFound("No provider with this name.")
    return row


async def list_provider_views(session: AsyncSession) -> list[ProviderView]:
    return [provider_view(p) for p in await providers.list_providers(session)]


async def show_provider(session: AsyncSession, name: str) -> ProviderView:
    return provider_view(await get_provider(session, name))


async def create_provider(session: AsyncSession, vault: Vault, data: CreateProvider) -> ProviderView:
    values = _checked(_spec(_fields(data)), vault)
    stmt = insert(Provider).values(**values).on_conflict_do_nothing(index_elements=[Provider.name])
    row = (await session.execute(stmt.returning(Provider))).scalar_one_or_none()
    if row is None:
        raise ProviderExists(f"A provider named '{data.name}' exists; update it instead.")
    return provider_view(row)


def _kept_secret(vault: Vault, key_id: str | None, sealed: bytes | None, *, owner: str, purpose: str) -> str | None:
    """A stored secret an update does not replace, opened to be written back as it is. One the key
    ring can no longer open is the operator's to fix by giving it again, not a crash (500)."""
    if key_id is None or sealed is None:
        return None
    try:
        return vault.decrypt_text(key_id, sealed, owner=owner, purpose=purpose)
    except SealError as exc:
        raise ConfigurationError(
            "A stored secret cannot be decrypted with the key ring; give it again in this update."
        ) from exc


async def update_provider(session: AsyncSession, vault: Vault, name: str, data: UpdateProvider) -> ProviderView:
    row = await get_provider(session, name, lock=True)
    # The spec's fields the row stores; ``parameters`` is not one (the row holds the endpoints
    # already filled from them), nor the secret, which is kept below.
    stored = Provider.__table__.columns.keys()
    current: dict[str, Any] = {
        f.name: getattr(row, f.name) for f in dataclasses.fields(providers.ProviderSpec) if f.name in stored
    }
    given = _fields(data)
    if "client_secret" not in given:
        current["client_secret"] = _kept_secret(
            vault, row.client_secret_key_id, row.client_secret_enc, owner=row.name, purpose=providers.CLIENT_SECRET
        )
    current.update(given)
    spec = _spec(current)
    _checked(spec, vault)
    return provider_view(await providers.upsert_provider(session, spec, vault))


async def set_provider_enabled(session: AsyncSession, name: str, enabled: bool) -> ProviderView:
    if not await providers.set_enabled(session, name, enabled):
        raise ProviderNotFound("No provider with this name.")
    return provider_view(await get_provider(session, name))


async def check_provider_discovery(
    sessions: async_sessionmaker[AsyncSession], vault: Vault, http: httpx.AsyncClient, name: str
) -> DiscoveryReport:
    """Fetch the metadata afresh (a new cache: nothing stale answers) and resolve as a connect would.

    The row is read in its own short session; the fetch runs on the shared client with no
    connection held, like every other outbound call."""
    async with sessions() as session:
        row = await get_provider(session, name)
    try:
        resolved = await providers.resolve(row, vault, MetadataCache(http=http, ttl=0))
    except DiscoveryFailed as exc:
        return DiscoveryReport(
            ok=False, discovered=bool(row.issuer), error_code=exc.problem_code, error=exc.detail, issuer=row.issuer
        )
    return DiscoveryReport(
        ok=True,
        discovered=bool(row.issuer),
        issuer=resolved.issuer,
        authorization_endpoint=resolved.authorization_endpoint,
        token_endpoint=resolved.token_endpoint,
        revocation_endpoint=resolved.revocation_endpoint,
        account_endpoint=resolved.account_endpoint,
        iss_parameter_supported=resolved.iss_parameter_supported,
    )


# ---- issuers -----------------------------------------------------------------------------------------
async def get_issuer(session: AsyncSession, issuer: str, *, lock: bool = False) -> Issuer:
    stmt = select(Issuer).where(Issuer.issuer == issuer).execution_options(populate_existing=True)
    row = (await session.execute(stmt.with_for_update() if lock else stmt)).scalar_one_or_none()
    if row is None:
        raise IssuerNotFound("No issuer with this URL.")
    return row


async def list_issuer_views(session: AsyncSession) -> list[IssuerView]:
    return [issuer_view(i) for i in await issuers.list_issuers(session)]


async def show_issuer(session: AsyncSession, issuer: str) -> IssuerView:
    return issuer_view(await get_issuer(session, issuer))


def _issuer_config(values: dict[str, Any]) -> issuers.IssuerConfig:
    values["scopes"] = tuple(values.get("scopes") or issuers.DEFAULT_SCOPES)
    return issuers.IssuerConfig(**values)


async def create_issuer(session: AsyncSession, vault: Vault, data: CreateIssuer) -> IssuerView:
    config = _issuer_config(_fields(data)).validated()
    # Serialize creators of this URL (there is no row to lock yet); the transaction ends it.
    await session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:i, 5))"), {"i": config.issuer})
    if (await session.execute(select(Issuer.id).where(Issuer.issuer == config.issuer))).first() is not None:
        raise IssuerExists("This issuer is registered; update it instead.")
    await issuers.upsert_issuer(session, vault, config)
    return issuer_view(await get_issuer(session, config.issuer))


async def update_issuer(session: AsyncSession, vault: Vault, data: UpdateIssuer) -> IssuerView:
    row = await get_issuer(session, data.issuer, lock=True)
    current: dict[str, Any] = {
        "issuer": row.issuer,
        "client_id": row.client_id,
        "display_name": row.display_name,
        "scopes": list(row.scopes or []),
        "authorization_endpoint": row.authorization_endpoint,
        "token_endpoint": row.token_endpoint,
        "jwks_uri": row.jwks_uri,
        "enabled": row.enabled,
        "introspection_endpoint": row.introspection_endpoint,
        "introspection_client_id": row.introspection_client_id,
    }
    given = _fields(data)
    if "client_secret" not in given:
        current["client_secret"] = _kept_secret(
            vault, row.client_secret_key_id, row.client_secret_enc, owner=str(row.id), purpose=issuers.SECRET_PURPOSE
        )
    if "introspection_client_secret" not in given:
        current["introspection_client_secret"] = _kept_secret(
            vault,
            row.introspection_secret_key_id,
            row.introspection_secret_enc,
            owner=str(row.id),
            purpose=issuers.INTROSPECTION_SECRET_PURPOSE,
        )
    current.update(given)
    await issuers.upsert_issuer(session, vault, _issuer_config(current))
    return issuer_view(await get_issuer(session, data.issuer))


async def set_issuer_enabled(session: AsyncSession, issuer: str, enabled: bool) -> IssuerView:
    """Disabling ends the issuer's browser sessions and login attempts in the same transaction."""
    if not await issuers.set_enabled(session, issuer, enabled):
        raise IssuerNotFound("No issuer with this URL.")
    return issuer_view(await get_issuer(session, issuer))


async def check_issuer_discovery(
    sessions: async_sessionmaker[AsyncSession], directory: issuers.IssuerDirectory, issuer: str
) -> DiscoveryReport:
    """Fetch ``/.well-known/openid-configuration`` now; explicit endpoints in the row still win.
    The row is read in its own short session; the fetch holds no connection."""
    async with sessions() as session:
        row = await get_issuer(session, issuer)
    try:
        metadata = await directory.discover(row.issuer)
    except issuers.IssuerUnavailable as exc:
        return DiscoveryReport(
            ok=False, discovered=True, error_code=exc.problem_code, error=exc.detail, issuer=row.issuer
        )
    endpoints = {
        name: getattr(row, name) or metadata.get(name)
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
    }
    missing = [name for name, value in endpoints.items() if not isinstance(value, str) or not value]
    return DiscoveryReport(
        ok=not missing,
        discovered=True,
        issuer=row.issuer,
        error_code="issuer_unavailable" if missing else None,
        error=f"The metadata has no {', '.join(missing)}." if missing else None,
        authorization_endpoint=endpoints["authorization_endpoint"],
        token_endpoint=endpoints["token_endpoint"],
        jwks_uri=endpoints["jwks_uri"],
        iss_parameter_supported=metadata.get("authorization_response_iss_parameter_supported") is True,
    )
