# size: every ELICITD_ variable as one typed field with its parsing and check: the settings' one reference
"""One frozen settings object, read from ``ELICITD_*`` variables when the process starts.

Nothing here is read at import time: ``Settings.from_env()`` is called by the CLI (or a test) and
the result is passed down explicitly, so two app instances in one process can differ.

Settings hold secrets (the key ring, database and Redis passwords, the signing and Stripe keys,
whatever else arrives as ``ELICITD_*``), and a settings object is exactly what ends up in a
debugger, an error report or a "starting with %r" log line. So ``repr``/``str`` never show one:
a text setting prints as ``'***'`` unless it is known to be harmless, passwords and query values
in URLs are masked, the key ring shows only its key ids, and ``extra`` only variable names.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from service.errors import ConfigurationError
from service.urls import is_https_or_loopback_http

_PREFIX = "ELICITD_"
# A host name of ``ELICITD_ALLOWED_HOSTS`` (an IPv4 address is one too), lowercase ASCII labels.
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*")


@dataclass(frozen=True, slots=True, repr=False)
class KeyRing:
    """Symmetric keys by id. The first key encrypts; every key decrypts (so keys can rotate)."""

    keys: tuple[tuple[str, bytes], ...]

    def __repr__(self) -> str:
        return f"KeyRing(ids={[kid for kid, _ in self.keys]!r})"

    @property
    def current(self) -> tuple[str, bytes]:
        return self.keys[0]

    def get(self, key_id: str) -> bytes | None:
        for kid, key in self.keys:
            if kid == key_id:
                return key
        return None

    @classmethod
    def parse(cls, raw: str, *, name: str) -> KeyRing:
        """Parse ``kid:base64key,kid2:base64key`` — 32-byte keys, unique ids, first one current."""
        entries: list[tuple[str, bytes]] = []
        for part in (p.strip() for p in raw.split(",")):
            if not part:
                continue
            kid, sep, b64 = part.partition(":")
            if not sep or not kid or not kid.isalnum():
                raise ConfigurationError(f"{name}: each entry must look like 'keyid:base64key' (keyid alphanumeric)")
            try:
                key = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            except (binascii.Error, ValueError) as exc:
                raise ConfigurationError(f"{name}: key '{kid}' is not valid base64") from exc
            if len(key) != 32:
                raise ConfigurationError(f"{name}: key '{kid}' must decode to 32 bytes, got {len(key)}")
            if any(kid == seen for seen, _ in entries):
                raise ConfigurationError(f"{name}: key id '{kid}' appears twice")
            entries.append((kid, key))
        if not entries:
            raise ConfigurationError(f"{name}: at least one key is required")
        return cls(tuple(entries))

    @staticmethod
    def generate_entry(kid: str) -> str:
        return f"{kid}:{base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip('=')}"


# ``ELICITD_REDIS_URL`` names a Redis Cluster with these schemes (``rediss`` for TLS); any other
# URL is one Redis server, as redis-py reads it.
CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
DEFAULT_REDIS_SHARDS = 16
MAX_REDIS_SHARDS = 1024


@dataclass(frozen=True, slots=True, repr=False)
class ClusterAddress:
    """Where a Redis Cluster is: the seed nodes (any reachable one tells the whole topology), the
    credentials every node shares, and whether to speak TLS."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    tls: bool = False

    def __repr__(self) -> str:
        shown = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.nodes)
        secret = ", password='***'" if self.password is not None else ""
        return f"ClusterAddress(nodes={shown!r}, tls={self.tls}{secret})"

    @classmethod
    def parse(cls, url: str) -> ClusterAddress | None:
        """``redis+cluster://[user[:password]@]host:port[,host2:port2…][/]``, or None for a URL
        that is not a cluster's. Errors never quote the URL: it may hold the password."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in CLUSTER_SCHEMES:
            return None
        name = "ELICITD_REDIS_URL"
        if "?" in rest or "#" in rest:
            raise ConfigurationError(f"{name}: a {scheme}:// URL takes no query or fragment")
        userinfo, _, location = rest.rpartition("@")
        hosts, _, path = location.partition("/")
        if path not in {"", "0"}:
            raise ConfigurationError(f"{name}: a Redis Cluster has only database 0 (end the URL with / or nothing)")
        nodes = tuple(_host_port(part, name) for part in hosts.split(","))
        username = password = None
        if userinfo:
            user, colon, secret = userinfo.partition(":")
            username = unquote(user) or None
            password = unquote(secret) if colon else None
        return cls(nodes=nodes, username=username, password=password, tls=CLUSTER_SCHEMES[scheme.lower()])


def _host_port(part: str, name: str) -> tuple[str, int]:
    part = part.strip()
    if part.startswith("["):
        host, bracket, port = part[1:].partition("]")
        port = port.removeprefix(":") if bracket else ""
    else:
        host, _, port = part.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{name}: each cluster node must be host:port (comma-separated), got {part!r}")
    return host, int(port)


class SecretValues(Mapping[str, str]):
    """A read-only mapping whose ``repr`` names its keys and never shows a value."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<{len(self._values)} values: {', '.join(sorted(self._values))}>"


@dataclass(frozen=True, slots=True, repr=False)
class Settings:
    database_url: str
    redis_url: str | None
    public_url: str
    keys: KeyRing
    dev_mode: bool = False
    default_ttl_seconds: int = 900
    max_ttl_seconds: int = 7 * 24 * 3600
    max_wait_seconds: int = 30
    poll_interval_seconds: float = 2.0
    request_state_grace_seconds: int = 600
    max_body_bytes: int = 64 * 1024
    sweep_interval_seconds: float = 5.0
    sweep_batch_size: int = 500
    api_key_cache_seconds: float = 5.0
    # Open secrets sealed before their owner's fields were bound (an upgrade, until
    # ``elicitd keys rotate`` has rebound them) and grants that carry no MAC yet (service.crypto.vault).
    accept_unbound_secrets: bool = False
    redis_channel: str = "elicitd:flows"
    # Shard channels wake-ups are spread over on a Redis Cluster (docs/scaling.md); unused otherwise.
    redis_shards: int = DEFAULT_REDIS_SHARDS
    # The ORM engine's pool: everything but the hot path's single statements.
    db_pool_size: int = 10
    # The hot path's own pool (``service.db.pool``): status, resolve, token, create, sweeps.
    db_statement_pool_size: int = 10
    # How long a request waits for a pooled connection before it is answered 503 + Retry-After.
    db_pool_timeout_seconds: float = 30.0
    # Short requests one process works on at once; the rest get 503 overloaded (service/admission.py).
    # 0: no bound. Why 64: docs/decisions.md.
    max_in_flight: int = 64
    # False behind a transaction-mode pooler that cannot track named prepared statements
    # (PgBouncer before 1.21): every statement is then prepared unnamed, per use (docs/scaling.md).
    db_statement_cache: bool = True
    log_level: str = "INFO"
    log_json: bool = True
    # Status reads and resolves answered by ``service.flows.hot`` (False: through Litestar's routing).
    hot_routes: bool = True
    # The language of a page when neither ``?lang=``, its cookie nor ``Accept-Language`` picks a shipped one.
    default_locale: str = "en"
    # Host names answered besides the public URL's and loopback (service/hosts.py), lowercase ASCII.
    allowed_hosts: tuple[str, ...] = ()
    # ``ELICITD_BACKGROUND_TASKS=false``: a replica that serves requests only, its upkeep (sweeps,
    # webhook delivery, proactive refresh, probes) left to ``elicitd worker`` processes.
    background_tasks: bool = True
    # Consent receipts: one or more PEM EC P-256 private keys; the first signs, all are published.
    signing_key: str | None = field(default=None, repr=False)
    # Payments (Stripe): the secret API key, the webhook endpoint secret, and an API base address
    # (only for a local Stripe-compatible server; production talks to Stripe's own).
    stripe_secret_key: str | None = field(default=None, repr=False)
    stripe_webhook_secret: str | None = field(default=None, repr=False)
    stripe_api_base: str | None = None
    # Issuers (and providers) declared in a TOML/YAML file, applied at startup.
    config_file: str | None = None
    browser_session_seconds: int = 8 * 3600
    # The operator console's sessions (service/console/auth.py): at most this long, ended after the
    # idle time without a request, and an admin-role change needs a sign-in this recent (max_age).
    console_session_seconds: int = 8 * 3600
    console_idle_seconds: int = 15 * 60
    console_reauth_seconds: int = 5 * 60
    # Each phase of a call to an issuer, provider, API-key check or Stripe (service/http.py).
    outbound_timeout_seconds: float = 15.0
    # Retention (service/flows/retention.py): how long terminal flows keep their result payload,
    # how long terminal flows, delivered webhook events and admin audit rows are kept. None: kept.
    result_retention_seconds: float | None = 7 * 86400.0
    flow_retention_seconds: float | None = 90 * 86400.0
    outbox_retention_seconds: float | None = 7 * 86400.0
    audit_retention_seconds: float | None = 365 * 86400.0
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every other ``ELICITD_*`` variable may be a secret (webhook or tracing credentials, an
        # admin token): keep them in a mapping that cannot print its values.
        if not isinstance(self.extra, SecretValues):
            object.__setattr__(self, "extra", SecretValues(self.extra))
        if not 1 <= self.redis_shards <= MAX_REDIS_SHARDS:
            raise ConfigurationError(
                f"ELICITD_REDIS_SHARDS must be between 1 and {MAX_REDIS_SHARDS}, got {self.redis_shards}"
            )
        # A brace in the channel would be the hash tag of every shard channel: all on one slot.
        if self.redis_cluster is not None and ("{" in self.redis_channel or "}" in self.redis_channel):
            raise ConfigurationError("ELICITD_REDIS_CHANNEL must not contain { or } on a Redis Cluster")

    def __repr__(self) -> str:
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, str):
                text = repr(mask_url(value)) if item.name in _SHOWN_TEXT else "'***'"
            else:
                text = repr(value)
            shown.append(f"{item.name}={text}")
        return f"Settings({', '.join(shown)})"

    __str__ = __repr__

    @property
    def redis_cluster(self) -> ClusterAddress | None:
        """The Redis Cluster ``redis_url`` names, or None for a single Redis (or none)."""
        return None if self.redis_url is None else ClusterAddress.parse(self.redis_url)

    @property
    def secure_cookies(self) -> bool:
        """Cookies get ``Secure`` and the ``__Host-`` prefix whenever elicitd is served over TLS."""
        return self.public_url.startswith("https://")

    @property
    def public_origin(self) -> str:
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:  # noqa: PLR0912, PLR0915 - a branch per setting
        """Read and validate ``ELICITD_*``; every problem is reported with the variable's name."""
        env = os.environ if env is None else env

        def get(name: str, default: str | None = None) -> str | None:
            return env.get(_PREFIX + name, default)

        dev_mode = _bool(get("DEV") or "false", "ELICITD_DEV")
        database_url = overrides.pop("database_url", None) or get("DATABASE_URL")
        if not database_url:
            raise ConfigurationError("ELICITD_DATABASE_URL is required (or run `elicitd dev` for embedded ones)")
        redis_url = overrides.pop("redis_url", None) or get("REDIS_URL") or None
        public_url = (get("PUBLIC_URL") or ("http://127.0.0.1:8000" if dev_mode else "")).rstrip("/")
        if not public_url:
            raise ConfigurationError("ELICITD_PUBLIC_URL is required (the https origin users' browsers reach)")
        if not (dev_mode or is_https_or_loopback_http(public_url)):
            raise ConfigurationError("ELICITD_PUBLIC_URL must be https:// (http is allowed only on loopback)")
        raw_keys = overrides.pop("keys", None) or get("KEYS")
        if raw_keys is None:
            raise ConfigurationError(
                "ELICITD_KEYS is required: 'keyid:base64(32 bytes)[,older...]' — make one with `elicitd keys generate`"
            )
        keys = raw_keys if isinstance(raw_keys, KeyRing) else KeyRing.parse(raw_keys, name="ELICITD_KEYS")
        values: dict[str, Any] = {
            "database_url": normalize_database_url(database_url),
            "redis_url": redis_url,
            "public_url": public_url,
            "keys": keys,
            "dev_mode": dev_mode,
        }
        ints = {
            "default_ttl_seconds": "DEFAULT_TTL_SECONDS",
            "max_ttl_seconds": "MAX_TTL_SECONDS",
            "max_wait_seconds": "MAX_WAIT_SECONDS",
            "max_body_bytes": "MAX_BODY_BYTES",
            "sweep_batch_size": "SWEEP_BATCH_SIZE",
            "db_pool_size": "DB_POOL_SIZE",
            "db_statement_pool_size": "DB_STATEMENT_POOL_SIZE",
            "request_state_grace_seconds": "REQUEST_STATE_GRACE_SECONDS",
            "browser_session_seconds": "BROWSER_SESSION_SECONDS",
            "console_session_seconds": "CONSOLE_SESSION_SECONDS",
            "console_idle_seconds": "CONSOLE_IDLE_SECONDS",
            "console_reauth_seconds": "CONSOLE_REAUTH_SECONDS",
        }
        for attr, name in ints.items():
            if (raw := get(name)) is not None:
                values[attr] = _positive_int(raw, _PREFIX + name)
        floats = {
            "poll_interval_seconds": "POLL_INTERVAL_SECONDS",
            "sweep_interval_seconds": "SWEEP_INTERVAL_SECONDS",
            "api_key_cache_seconds": "API_KEY_CACHE_SECONDS",
            "db_pool_timeout_seconds": "DB_POOL_TIMEOUT_SECONDS",
            "outbound_timeout_seconds": "OUTBOUND_TIMEOUT_SECONDS",
        }
        for attr, name in floats.items():
            if (raw := get(name)) is not None:
                values[attr] = _non_negative_float(raw, _PREFIX + name)
        if raw := get("CONFIG_FILE"):
            values["config_file"] = raw
        retention = {
            "result_retention_seconds": "RESULT_RETENTION",
            "flow_retention_seconds": "FLOW_RETENTION",
            "outbox_retention_seconds": "OUTBOX_RETENTION",
            "audit_retention_seconds": "AUDIT_RETENTION",
        }
        for attr, name in retention.items():
            if (raw := get(name)) is not None:
                values[attr] = _retention(raw, _PREFIX + name)
        if (raw := get("REDIS_CHANNEL")) is not None:
            values["redis_channel"] = raw
        if (raw := get("REDIS_SHARDS")) is not None:
            values["redis_shards"] = _positive_int(raw, "ELICITD_REDIS_SHARDS")
        if (raw := get("LOG_LEVEL")) is not None:
            values["log_level"] = raw.upper()
        if (raw := get("LOG_JSON")) is not None:
            values["log_json"] = _bool(raw, "ELICITD_LOG_JSON")
        if (raw := get("BACKGROUND_TASKS")) is not None:
            values["background_tasks"] = _bool(raw, "ELICITD_BACKGROUND_TASKS")
        if (raw := get("ACCEPT_UNBOUND_SECRETS")) is not None:
            values["accept_unbound_secrets"] = _bool(raw, "ELICITD_ACCEPT_UNBOUND_SECRETS")
        if (raw := get("MAX_IN_FLIGHT")) is not None:
            values["max_in_flight"] = _non_negative_int(raw, "ELICITD_MAX_IN_FLIGHT")
        if (raw := get("HOT_ROUTES")) is not None:
            values["hot_routes"] = _bool(raw, "ELICITD_HOT_ROUTES")
        if (raw := get("ALLOWED_HOSTS")) is not None:
            values["allowed_hosts"] = _host_names(raw, "ELICITD_ALLOWED_HOSTS")
        if (raw := get("DB_STATEMENT_CACHE")) is not None:
            values["db_statement_cache"] = _bool(raw, "ELICITD_DB_STATEMENT_CACHE")
        if (raw := get("DEFAULT_LOCALE")) is not None:
            values["default_locale"] = _locale(raw, "ELICITD_DEFAULT_LOCALE")
        values.update(_kind_settings(get))
        values["extra"] = {k[len(_PREFIX) :]: v for k, v in env.items() if k.startswith(_PREFIX)}
        values.update(overrides)
        settings = cls(**values)
        if settings.default_ttl_seconds > settings.max_ttl_seconds:
            raise ConfigurationError("ELICITD_DEFAULT_TTL_SECONDS must not exceed ELICITD_MAX_TTL_SECONDS")
        return settings


def _kind_settings(get: Any) -> dict[str, Any]:
    """Signing key (inline PEM or a file) and Stripe settings; absent ones leave their kind off."""
    values: dict[str, Any] = {}
    signing = get("SIGNING_KEY")
    if not signing and (path := get("SIGNING_KEY_FILE")):
        try:
            with open(path, encoding="ascii") as handle:
                signing = handle.read()
        except OSError as exc:
            raise ConfigurationError(f"ELICITD_SIGNING_KEY_FILE: cannot read {path!r}") from exc
    if signing:
        values["signing_key"] = signing
    for attr, name in (
        ("stripe_secret_key", "STRIPE_SECRET_KEY"),
        ("stripe_webhook_secret", "STRIPE_WEBHOOK_SECRET"),
        ("stripe_api_base", "STRIPE_API_BASE"),
    ):
        if raw := get(name):
            values[attr] = raw
    return values


# The text settings ``repr`` shows (URLs with their passwords and query values masked). Any other
# text setting shows as '***': a new one counts as a secret until it is listed here.
_SHOWN_TEXT = frozenset(
    {"database_url", "redis_url", "public_url", "redis_channel", "log_level", "stripe_api_base", "config_file"}
)


def mask_url(value: str) -> str:
    """``value`` with a URL's password and every query value replaced by ``***`` (database and
    Redis URLs carry passwords in either place); anything that is not a URL is returned as is."""
    if "://" not in value:
        return value
    scheme, _, rest = value.partition("://")
    if scheme.lower() in CLUSTER_SCHEMES:
        # Several host:port pairs are no netloc urlsplit can read: mask the userinfo by hand.
        userinfo, at, location = rest.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.partition(":")[0] + ":***"
        location = location.partition("?")[0].partition("#")[0]
        return f"{scheme}://{userinfo}{at}{location}"
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "***"  # cannot tell which part is the password: show none of it
    netloc = parts.netloc
    if parts.username is not None or parts.password is not None:
        user = parts.username or ""
        hostport = f"[{host}]" if ":" in host else host
        if port is not None:
            hostport += f":{port}"
        netloc = f"{user}{':***' if parts.password is not None else ''}@{hostport}"
    query = "&".join(f"{pair.partition('=')[0]}=***" for pair in parts.query.split("&") if pair)
    return urlunsplit((parts.scheme, netloc, parts.path, query, "***" if parts.fragment else ""))


def normalize_database_url(url: str) -> str:
    """Accept ``postgresql://`` URLs as people write them and use the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ConfigurationError("ELICITD_DATABASE_URL must be a postgresql:// URL")


def _host_names(raw: str, name: str) -> tuple[str, ...]:
    """``name1,name2,…``: DNS names or IP addresses (IPv6 with or without brackets), no port, no
    scheme, no wildcard; lowercased, as ``Host`` is compared (``service.hosts``)."""
    names: list[str] = []
    for part in (p.strip().lower() for p in raw.split(",")):
        if not part:
            continue
        bare = part[1:-1] if part.startswith("[") and part.endswith("]") else part
        try:
            names.append(str(ipaddress.IPv6Address(bare)))
        except ValueError:
            if not _HOST_NAME.fullmatch(part.removesuffix(".")):
                raise ConfigurationError(
                    f"{name}: {part!r} is not a host name or IP address (no scheme, port, path or wildcard)"
                ) from None
            names.append(part.removesuffix("."))
    return tuple(dict.fromkeys(names))


def _locale(raw: str, name: str) -> str:
    from service.i18n import BY_TAG

    found = BY_TAG.get(raw.strip().lower().replace("_", "-"))
    if found is None:
        raise ConfigurationError(f"{name} must be one of {', '.join(sorted(BY_TAG))}, got {raw!r}")
    return found.tag


def _bool(raw: str, name: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


def positive_extras(settings: Settings, prefix: str, kinds: Mapping[str, type[int] | type[float]]) -> dict[str, Any]:
    """The tunables of one component: each ``ELICITD_<prefix><NAME>`` of ``kinds`` that is set, read
    from ``settings.extra`` as a positive number of its kind, keyed by its lowercase name."""
    values: dict[str, Any] = {}
    for name, kind in kinds.items():
        variable = prefix + name.upper()
        raw = settings.extra.get(variable)
        if raw is None:
            continue
        try:
            values[name] = kind(raw)
        except ValueError:
            raise ConfigurationError(f"ELICITD_{variable} must be a number") from None
        if values[name] <= 0:
            raise ConfigurationError(f"ELICITD_{variable} must be positive")
    return values


def _positive_int(raw: str, name: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def _non_negative_int(raw: str, name: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value < 0:
        raise ConfigurationError(f"{name} must not be negative, got {value}")
    return value


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _retention(raw: str, name: str) -> float | None:
    """A retention window: seconds, or a number with ``s``/``m``/``h``/``d``; ``off`` keeps forever."""
    text = raw.strip().lower()
    if text in {"off", "never", "forever"}:
        return None
    unit = _DURATION_UNITS.get(text[-1:], 0)
    number = text[:-1] if unit else text
    try:
        value = float(number) * (unit or 1)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be a duration like 604800, 7d or 12h, or off; got {raw!r}") from exc
    if not 0 < value < float("inf"):
        raise ConfigurationError(f"{name} must be positive (or off), got {raw!r}")
    return value


def _non_negative_float(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from exc
    if value < 0:
        raise ConfigurationError(f"{name} must not be negative, got {value}")
    return value
