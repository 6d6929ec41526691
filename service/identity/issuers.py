# size: a sign-in issuer whole: its declaration, its row and the directory resolving it (metadata and keys cached)
"""Trusted OIDC identity providers ("issuers") as data, with cached discovery metadata.

An issuer row says where elicitd sends a browser to prove who it is. Endpoints are either given
explicitly or discovered from ``/.well-known/openid-configuration``; discovered metadata is cached
in the row (so replicas and restarts share it) and in process (so a login costs no extra round
trip), each for ``METADATA_TTL_SECONDS``. The client secret, when the issuer needs one, is a vault
value bound to the row id and the purpose ``issuer_client_secret``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.db.unit import unit_of_work
from service.errors import ConfigurationError, ElicitdError, InvalidRequest
from service.http import make_http_client, read_json
from service.identity import sessions as browser_sessions
from service.identity.models import Issuer
from service.oauth_client import MetadataFailed, fetch_metadata
from service.text import display_text_problem
from service.urls import url_problem

SECRET_PURPOSE = "issuer_client_secret"
INTROSPECTION_SECRET_PURPOSE = "issuer_introspection_secret"
METADATA_TTL_SECONDS = 3600.0
JWKS_TTL_SECONDS = 3600.0
# A token signed with an unknown key may mean the issuer rotated keys: refetch, but at most this
# often, so a stream of forged tokens cannot turn elicitd into a JWKS request amplifier.
JWKS_REFRESH_MIN_SECONDS = 30.0
HTTP_TIMEOUT_SECONDS = 10.0
DEFAULT_SCOPES = ("openid",)


# What a failed discovery says (``service.oauth_client.MetadataFailed.reason``): never the issuer's text.
_DISCOVERY_FAILED = {
    "unreachable": "The sign-in service's metadata could not be fetched.",
    "http_status": "The sign-in service's metadata answered HTTP {status}.",
    "not_json": "The sign-in service's metadata is not JSON.",
    "not_object": "The sign-in service's metadata names another issuer.",
    "issuer_mismatch": "The sign-in service's metadata names another issuer.",
}


class IssuerUnavailable(ElicitdError):
    """The issuer's metadata or keys could not be fetched or made no sense."""

    code = "issuer_unavailable"
    status = 502
    title = "The sign-in service is not reachable"


def check_issuer_url(value: str, *, what: str = "issuer") -> str:
    """An issuer identifier (or endpoint): the URL rule (``service.urls``), without query or fragment."""
    problem = url_problem(value, query=False)
    if problem is not None:
        raise InvalidRequest(f"{what} is not a usable URL: {problem}.")
    return value


@dataclass(frozen=True, slots=True)
class IssuerConfig:
    """What an operator declares about an issuer (CLI or config file)."""

    issuer: str
    client_id: str
    client_secret: str | None = None
    display_name: str | None = None
    # RFC 7662 introspection of opaque subject tokens (service/identity/subject_proof.py).
    introspection_endpoint: str | None = None
    introspection_client_id: str | None = None
    introspection_client_secret: str | None = None
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    jwks_uri: str | None = None
    enabled: bool = True

    def validated(self) -> IssuerConfig:
        check_issuer_url(self.issuer)
        if (problem := display_text_problem(self.display_name, "display_name")) is not None:
            raise InvalidRequest(problem + ".")
        if self.introspection_client_secret is not None and not (self.introspection_client_id or "").strip():
            raise InvalidRequest("introspection_client_secret needs introspection_client_id.")
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri", "introspection_endpoint"):
            value = getattr(self, name)
            if value is not None:
                check_issuer_url(value, what=name)
        if not self.client_id.strip():
            raise InvalidRequest("client_id must not be empty.")
        if "openid" not in self.scopes:
            raise InvalidRequest("scopes must include 'openid' (the login needs an ID token).")
        return self


@dataclass(frozen=True, slots=True)
class ResolvedIssuer:
    """An enabled issuer with everything a login needs; holds the decrypted secret, never log it."""

    id: uuid.UUID
    issuer: str
    display_name: str
    client_id: str
    client_secret: str | None = field(repr=False)
    scopes: tuple[str, ...]
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    iss_parameter_supported: bool
    token_auth_method: str
    # Where and as whom to introspect opaque subject tokens; None when not configured.
    introspection_endpoint: str | None = None
    introspection_client_id: str | None = None
    introspection_client_secret: str | None = field(default=None, repr=False)


# ---- repository ---------------------------------------------------------------------------------
async def upsert_issuer(session: AsyncSession, vault: Vault, config: IssuerConfig) -> uuid.UUID:
    """Create or update an issuer by its URL; returns the row id. Does not commit.

    Metadata is cleared when endpoints change so the next login rediscovers. The secret is
    encrypted after the upsert because its associated data is the row id, known only then.
    """
    config = config.validated()
    row = await session.execute(
        text("""
        INSERT INTO issuers (id, issuer, display_name, client_id, scopes, authorization_endpoint,
                             token_endpoint, jwks_uri, enabled, introspection_endpoint, introspection_client_id)
        VALUES (:id, :issuer, :display_name, :client_id, :scopes, :ae, :te, :ju, :enabled, :ie, :icid)
        ON CONFLICT (issuer) DO UPDATE SET
            display_name = EXCLUDED.display_name, client_id = EXCLUDED.client_id, scopes = EXCLUDED.scopes,
            authorization_endpoint = EXCLUDED.authorization_endpoint, token_endpoint = EXCLUDED.token_endpoint,
            jwks_uri = EXCLUDED.jwks_uri, enabled = EXCLUDED.enabled, metadata = NULL,
            introspection_endpoint = EXCLUDED.introspection_endpoint,
            introspection_client_id = EXCLUDED.introspection_client_id,
            metadata_fetched_at = NULL, updated_at = now()
        RETURNING id
        """),
        {
            "id": uuid.uuid4(),
            "issuer": config.issuer,
            "display_name": config.display_name or _default_name(config),
            "client_id": config.client_id,
            "scopes": list(config.scopes),
            "ae": config.authorization_endpoint,
            "te": config.token_endpoint,
            "ju": config.jwks_uri,
            "enabled": config.enabled,
            "ie": config.introspection_endpoint,
            "icid": config.introspection_client_id,
        },
    )
    issuer_id: uuid.UUID = row.scalar_one()
    if not config.enabled:
        await browser_sessions.end_all_for_issuer(session, issuer_id)
    key_id, blob = (None, None)
    if config.client_secret is not None:
        key_id, blob = vault.encrypt(config.client_secret, owner=str(issuer_id), purpose=SECRET_PURPOSE)
    ikey_id, iblob = (None, None)
    if config.introspection_client_secret is not None:
        ikey_id, iblob = vault.encrypt(
            config.introspection_client_secret, owner=str(issuer_id), purpose=INTROSPECTION_SECRET_PURPOSE
        )
    await session.execute(
        text(
            "UPDATE issuers SET client_secret_enc = :blob, client_secret_key_id = :kid, "
            "introspection_secret_enc = :iblob, introspection_secret_key_id = :ikid WHERE id = :id"
        ),
        {"blob": blob, "kid": key_id, "iblob": iblob, "ikid": ikey_id, "id": issuer_id},
    )
    return issuer_id


def _default_name(config: IssuerConfig) -> str:
    return urlsplit(config.issuer).hostname or config.issuer


async def list_issuers(session: AsyncSession) -> Sequence[Issuer]:
    return (await session.execute(select(Issuer).order_by(Issuer.issuer))).scalars().all()


async def set_enabled(session: AsyncSession, issuer: str, enabled: bool) -> bool:
    """Enable or disable by issuer URL; False when there is no such issuer. Disabling also ends its
    browser sessions and login attempts, in the same transaction."""
    result = await session.execute(
        text("UPDATE issuers SET enabled = :e, updated_at = now() WHERE issuer = :i RETURNING id"),
        {"e": enabled, "i": issuer},
    )
    row = result.first()
    if row is not None and not enabled:
        await browser_sessions.end_all_for_issuer(session, row.id)
    return row is not None


def issuer_public_view(row: Issuer) -> dict[str, Any]:
    """An issuer as the CLI/admin show it: whether a secret exists, never the secret."""
    return {
        "issuer": row.issuer,
        "display_name": row.display_name,
        "client_id": row.client_id,
        "client_secret": "set" if row.client_secret_enc is not None else "none (public client)",
        "scopes": " ".join(row.scopes or []),
        "enabled": row.enabled,
        "endpoints": "explicit" if row.authorization_endpoint and row.token_endpoint and row.jwks_uri else "discovered",
        "introspection": "configured" if row.introspection_client_id else "none",
        "metadata_fetched_at": row.metadata_fetched_at,
    }


def check_config_table(
    entry: Any, where: str, allowed: Collection[str], *, secrets: Sequence[str] = ("client_secret",)
) -> None:
    """Refuse a config file entry that is not a table, holds a secret itself (secrets stay in the
    environment), or has a key not ``allowed``; the ``[[issuers]]`` and ``[operator_signin]``
    tables are checked alike."""
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where} must be a table")
    if any(key in entry for key in secrets):
        raise ConfigurationError(f"{where}: put the secret in an environment variable (client_secret_env)")
    unknown = set(entry) - set(allowed)
    if unknown:
        raise ConfigurationError(f"{where}: unknown keys {sorted(unknown)}")


def env_secret(entry: Mapping[str, Any], key: str, env: Mapping[str, str], where: str) -> str | None:
    """The secret in the environment variable ``entry[key]`` names (None when it names none); a named
    variable that is unset or empty is refused rather than read as "no secret"."""
    if (var := entry.get(key)) is None:
        return None
    secret = env.get(str(var))
    if not secret:
        raise ConfigurationError(f"{where}: environment variable {var} is not set")
    return secret


async def apply_config_section(session: AsyncSession, vault: Vault, entries: Any, env: Mapping[str, str]) -> int:
    """The ``issuers:`` section of the config file: a list of tables, one per issuer.

    Each entry: ``issuer``, ``client_id``, optional ``client_secret_env`` (the name of an
    environment variable holding the secret: secrets stay out of the file), ``display_name``,
    ``scopes``, ``authorization_endpoint``, ``token_endpoint``, ``jwks_uri``, ``enabled``, and for
    opaque subject tokens ``introspection_client_id``, ``introspection_client_secret_env``,
    ``introspection_endpoint`` (default: the one in the issuer's metadata).
    """
    if not isinstance(entries, list):
        raise ConfigurationError("config file: 'issuers' must be a list of tables")
    allowed = {
        "issuer",
        "client_id",
        "client_secret_env",
        "display_name",
        "scopes",
        "authorization_endpoint",
        "token_endpoint",
        "jwks_uri",
        "enabled",
        "introspection_endpoint",
        "introspection_client_id",
        "introspection_client_secret_env",
    }
    for index, entry in enumerate(entries):
        where = f"config file: issuers[{index}]"
        check_config_table(entry, where, allowed, secrets=("client_secret", "introspection_client_secret"))
        secret = env_secret(entry, "client_secret_env", env, where)
        introspection_secret = env_secret(entry, "introspection_client_secret_env", env, where)
        try:
            config = IssuerConfig(
                issuer=str(entry["issuer"]),
                client_id=str(entry["client_id"]),
                client_secret=secret,
                display_name=entry.get("display_name"),
                scopes=tuple(entry.get("scopes", DEFAULT_SCOPES)),
                authorization_endpoint=entry.get("authorization_endpoint"),
                token_endpoint=entry.get("token_endpoint"),
                jwks_uri=entry.get("jwks_uri"),
                enabled=bool(entry.get("enabled", True)),
                introspection_endpoint=entry.get("introspection_endpoint"),
                introspection_client_id=entry.get("introspection_client_id"),
                introspection_client_secret=introspection_secret,
            )
            await upsert_issuer(session, vault, config)
        except KeyError as exc:
            raise ConfigurationError(f"{where}: '{exc.args[0]}' is required") from None
        except InvalidRequest as exc:
            raise ConfigurationError(f"{where}: {exc.detail}") from None
    return len(entries)


# ---- resolution and caches ------------------------------------------------------------------------
class IssuerDirectory:
    """Enabled issuers by URL, with discovery metadata and JWKS cached in process and in the row."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        *,
        http: httpx.AsyncClient | None = None,
        metadata_ttl: float = METADATA_TTL_SECONDS,
        clock: Clock | None = None,
        read_sessions: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        self._sessions = sessions
        # Every page view of a flow resolves its issuer: in autocommit sessions when given, the
        # lookup is its statements alone, without a BEGIN/ROLLBACK round trip around them.
        self._read_sessions = read_sessions or sessions
        # The in-process caches' freshness, and "now" when an ID token's times are checked.
        self.clock: Clock = clock or SystemClock()
        self._vault = vault
        self._http = http
        self._owns_http = False
        self._metadata_ttl = metadata_ttl
        self._metadata: dict[str, tuple[float, dict[str, Any]]] = {}
        self._jwks: dict[str, tuple[float, dict[str, Any]]] = {}
        # Each JWKS document above, parsed (a joserfc KeySet), by its URI: see ``key_set``.
        self._key_sets: dict[str, tuple[dict[str, Any], Any]] = {}
        # One fetch per key-set URL at a time: sign-ins that find the cache empty together wait for
        # the one fetch instead of each asking the issuer.
        self._jwks_locks: dict[str, asyncio.Lock] = {}

    @property
    def http(self) -> httpx.AsyncClient:
        """The process's shared client when given; a command without one gets its own, once."""
        if self._http is None:
            self._http = make_http_client(HTTP_TIMEOUT_SECONDS)
            self._owns_http = True
        return self._http

    async def close(self) -> None:
        """Close the client this directory made (a shared one belongs to whoever passed it)."""
        if self._http is not None and self._owns_http:
            await self._http.aclose()
            self._http = None
            self._owns_http = False

    async def resolve(self, issuer: str) -> ResolvedIssuer | None:
        """The enabled issuer with this exact URL, endpoints filled in; None when not registered."""
        async with self._read_sessions() as session:
            row = (
                await session.execute(select(Issuer).where(Issuer.issuer == issuer, Issuer.enabled.is_(True)))
            ).scalar_one_or_none()
            if row is None:
                return None
            metadata = await self._stored_metadata(session, row)
        return self._resolved(row, metadata if metadata is not None else await self._rediscover(row))

    async def resolve_id(self, issuer_id: uuid.UUID) -> ResolvedIssuer | None:
        async with self._read_sessions() as session:
            row = await session.get(Issuer, issuer_id)
            if row is None or not row.enabled:
                return None
            metadata = await self._stored_metadata(session, row)
        return self._resolved(row, metadata if metadata is not None else await self._rediscover(row))

    def _resolved(self, row: Issuer, metadata: dict[str, Any]) -> ResolvedIssuer:
        try:
            secret = self._vault.open_stored(
                row.client_secret_key_id, row.client_secret_enc, owner=str(row.id), purpose=SECRET_PURPOSE
            )
        except SealError as exc:
            raise ConfigurationError("The issuer's client secret cannot be decrypted with the key ring.") from exc
        try:
            introspection_secret = self._vault.open_stored(
                row.introspection_secret_key_id,
                row.introspection_secret_enc,
                owner=str(row.id),
                purpose=INTROSPECTION_SECRET_PURPOSE,
            )
        except SealError as exc:
            raise ConfigurationError(
                "The issuer's introspection secret cannot be decrypted with the key ring."
            ) from exc
        introspection = row.introspection_endpoint or metadata.get("introspection_endpoint")
        endpoints = {}
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = getattr(row, name) or metadata.get(name)
            if not isinstance(value, str) or not value:
                raise IssuerUnavailable(f"The sign-in service's metadata has no {name}.")
            endpoints[name] = check_issuer_url(value, what=name)
        methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if secret is None:
            auth_method = "none"
        elif "client_secret_basic" in methods:
            auth_method = "client_secret_basic"
        else:
            auth_method = "client_secret_post"
        return ResolvedIssuer(
            id=row.id,
            issuer=row.issuer,
            display_name=row.display_name,
            client_id=row.client_id,
            client_secret=secret,
            scopes=tuple(row.scopes or DEFAULT_SCOPES),
            authorization_endpoint=endpoints["authorization_endpoint"],
            token_endpoint=endpoints["token_endpoint"],
            jwks_uri=endpoints["jwks_uri"],
            iss_parameter_supported=metadata.get("authorization_response_iss_parameter_supported") is True,
            token_auth_method=auth_method,
            introspection_endpoint=(
                check_issuer_url(introspection, what="introspection_endpoint")
                if isinstance(introspection, str) and introspection and row.introspection_client_id
                else None
            ),
            introspection_client_id=row.introspection_client_id,
            introspection_client_secret=introspection_secret,
        )

    async def _stored_metadata(self, session: AsyncSession, row: Issuer) -> dict[str, Any] | None:
        """Metadata still fresh in process or in the row; None when it must be discovered again."""
        if row.authorization_endpoint and row.token_endpoint and row.jwks_uri and row.metadata_ is None:
            return {}
        now = self.clock.monotonic()
        cached = self._metadata.get(row.issuer)
        if cached is not None and cached[0] > now:
            return cached[1]
        fresh_in_row = await session.execute(
            text(
                "SELECT metadata FROM issuers WHERE id = :id AND metadata IS NOT NULL "
                "AND metadata_fetched_at > now() - make_interval(secs => :ttl)"
            ),
            {"id": row.id, "ttl": self._metadata_ttl},
        )
        metadata: dict[str, Any] | None = fresh_in_row.scalar_one_or_none()
        if metadata is not None:
            self._metadata[row.issuer] = (now + self._metadata_ttl, metadata)
        return metadata

    async def _rediscover(self, row: Issuer) -> dict[str, Any]:
        """Fetch the metadata with no connection held (an issuer may take seconds to answer), then
        store it for the other replicas; when two race, the later fresh document wins."""
        metadata = await self.discover(row.issuer)
        async with unit_of_work(self._sessions) as session:
            await session.execute(
                text("UPDATE issuers SET metadata = CAST(:m AS jsonb), metadata_fetched_at = now() WHERE id = :id"),
                {"m": json.dumps(metadata), "id": row.id},
            )
        self._metadata[row.issuer] = (self.clock.monotonic() + self._metadata_ttl, metadata)
        return metadata

    async def discover(self, issuer: str) -> dict[str, Any]:
        """Fetch OIDC discovery metadata; its ``issuer`` must equal ours exactly (OIDC Discovery §4.3)."""
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            return await fetch_metadata(self.http, url, issuer=issuer, timeout=HTTP_TIMEOUT_SECONDS)
        except MetadataFailed as failed:
            raise IssuerUnavailable(_DISCOVERY_FAILED[failed.reason].format(status=failed.status)) from failed

    async def jwks(self, issuer: ResolvedIssuer, *, refresh: bool = False) -> dict[str, Any]:
        """The issuer's signing keys; ``refresh`` refetches (rate-limited) after an unknown ``kid``."""
        cached_keys = self._cached_jwks(issuer.jwks_uri, refresh=refresh)
        if cached_keys is not None:
            return cached_keys
        lock = self._jwks_locks.setdefault(issuer.jwks_uri, asyncio.Lock())
        async with lock:
            # Whoever held the lock may have fetched them meanwhile.
            cached_keys = self._cached_jwks(issuer.jwks_uri, refresh=refresh)
            if cached_keys is not None:
                return cached_keys
            return await self._fetch_jwks(issuer.jwks_uri)

    async def key_set(self, issuer: ResolvedIssuer, *, refresh: bool = False) -> Any:
        """``jwks`` parsed into a joserfc ``KeySet``, once per fetched document: parsing one EC and
        one RSA key took ~80 µs, as long as the ES256 signature check itself, on every token the
        verification cache had not seen. A refetch stores a new document, which is parsed anew.
        ``ValueError`` or joserfc's errors when the document holds no usable key."""
        keys = await self.jwks(issuer, refresh=refresh)
        parsed = self._key_sets.get(issuer.jwks_uri)
        if parsed is not None and parsed[0] is keys:
            return parsed[1]
        from joserfc.jwk import KeySet

        key_set = KeySet.import_key_set(keys)  # type: ignore[arg-type]
        self._key_sets[issuer.jwks_uri] = (keys, key_set)
        return key_set

    def _cached_jwks(self, uri: str, *, refresh: bool) -> dict[str, Any] | None:
        cached = self._jwks.get(uri)
        if cached is None:
            return None
        fetched_at, keys = cached
        age = self.clock.monotonic() - fetched_at
        if age < JWKS_TTL_SECONDS and (not refresh or age < JWKS_REFRESH_MIN_SECONDS):
            return keys
        return None

    async def _fetch_jwks(self, uri: str) -> dict[str, Any]:
        now = self.clock.monotonic()
        try:
            async with asyncio.timeout(HTTP_TIMEOUT_SECONDS):  # one deadline for the whole call
                response = await self.http.get(uri, headers={"Accept": "application/json"})
            loaded: Any = read_json(response) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, TimeoutError) as exc:
            raise IssuerUnavailable("The sign-in service's keys could not be fetched.") from exc
        if not isinstance(loaded, dict) or not isinstance(loaded.get("keys"), list):
            raise IssuerUnavailable("The sign-in service's keys could not be read.")
        keys: dict[str, Any] = loaded
        self._jwks[uri] = (now, keys)
        return keys

    def forget(self, issuer: str | None = None) -> None:
        """Drop in-process caches (tests; after ``issuers add`` changed endpoints)."""
        if issuer is None:
            self._metadata.clear()
            self._jwks.clear()
            self._key_sets.clear()
        else:
            self._metadata.pop(issuer, None)
