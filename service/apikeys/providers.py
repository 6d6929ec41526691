"""API-key providers: a provider row with ``auth_type = 'api_key'`` and its definition as data.

The definition says what the page asks for (the key, plus named extra fields such as a region or
an account id), how an entered key is validated (length, allowed characters, and optionally a
live request to the provider with the key), and which extra field, if any, names the account.
Connections reference providers by name, so an API-key provider shares the ``providers`` table
with OAuth ones; its OAuth columns stay empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import ConfigurationError
from service.text import display_text_problem
from service.urls import is_https_or_loopback_http

Name = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
FieldName = Annotated[str, Meta(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_]*$")]
Label = Annotated[str, Meta(min_length=1, max_length=100)]


class ExtraField(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A non-secret value entered beside the key (stored in clear with the connection)."""

    name: FieldName
    label: Label
    required: bool = True
    choices: Annotated[list[Annotated[str, Meta(min_length=1, max_length=64)]], Meta(max_length=50)] | None = None
    pattern: Annotated[str, Meta(max_length=200)] | None = None
    max_length: Annotated[int, Meta(ge=1, le=255)] = 100
    help: Annotated[str, Meta(max_length=300)] | None = None
    example: Annotated[str, Meta(max_length=100)] | None = None  # shown as "For example: …"


class LiveCheck(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request made with the entered key before it is stored: 2xx means valid, 401/403 invalid.

    ``url`` may name extra fields as ``{region}``; only values that passed their own validation
    (and are URL-quoted) are substituted. The key goes only in a header, never in the URL.
    """

    url: Annotated[str, Meta(min_length=8, max_length=500)]
    method: Literal["GET", "POST"] = "GET"
    auth: Literal["bearer", "basic", "header"] = "bearer"
    header: Annotated[str, Meta(pattern=r"^[A-Za-z0-9-]{1,64}$")] | None = None
    # ``header`` auth: text before the key in the header (PagerDuty's ``Token token=``).
    prefix: Annotated[str, Meta(max_length=64, pattern=r"^[\x20-\x7e]*$")] = ""
    # ``basic`` auth: the user name is this extra field's value and the password the key (Twilio's
    # account SID and auth token); else the user name is the key and the password ``basic_password``.
    basic_username_field: FieldName | None = None
    basic_password: Annotated[str, Meta(max_length=64, pattern=r"^[\x21-\x7e]*$")] = ""
    # Constant headers the provider wants on every call (Anthropic's API version); never the key.
    headers: Annotated[
        dict[
            Annotated[str, Meta(pattern=r"^[A-Za-z0-9-]{1,64}$")],
            Annotated[str, Meta(max_length=200, pattern=r"^[\x20-\x7e]*$")],
        ],
        Meta(max_length=10),
    ] = {}
    timeout_seconds: Annotated[float, Meta(gt=0, le=30)] = 10.0


class ApiKeyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    key_label: Label = "API key"
    help: Annotated[str, Meta(max_length=500)] | None = None
    help_url: Annotated[str, Meta(max_length=500, pattern=r"^https://")] | None = None
    min_length: Annotated[int, Meta(ge=1, le=4096)] = 8
    max_length: Annotated[int, Meta(ge=1, le=4096)] = 512
    # Allowed characters, as a regular expression the whole key must match.
    pattern: Annotated[str, Meta(max_length=200)] = r"^[\x21-\x7e]+$"
    fields: Annotated[list[ExtraField], Meta(max_length=10)] = []
    account_field: FieldName | None = None
    check: LiveCheck | None = None


@dataclass(frozen=True, slots=True)
class ApiKeyProvider:
    name: str
    display_name: str
    enabled: bool
    config: ApiKeyConfig


def parse_config(raw: Any, *, name: str) -> ApiKeyConfig:
    """Validate a definition completely (regexes compile, URL is https, fields are consistent)."""
    try:
        config = msgspec.convert(raw, ApiKeyConfig)
    except msgspec.ValidationError as exc:
        raise ConfigurationError(f"api-key provider '{name}': {exc}") from None
    patterns = [config.pattern] + [f.pattern for f in config.fields if f.pattern]
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(f"api-key provider '{name}': pattern {pattern!r} does not compile") from exc
    if config.min_length > config.max_length:
        raise ConfigurationError(f"api-key provider '{name}': min_length exceeds max_length")
    names = [f.name for f in config.fields]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"api-key provider '{name}': field names must be unique")
    if config.account_field is not None and config.account_field not in names:
        raise ConfigurationError(f"api-key provider '{name}': account_field names no field")
    if config.check is not None:
        # ``{field}`` placeholders are filled from checked, quoted field values: the URL is judged
        # with each standing for a plain label, and each must name a field.
        placed = re.findall(r"\{([a-z][a-z0-9_]*)\}", config.check.url)
        if any(field not in names for field in placed):
            raise ConfigurationError(f"api-key provider '{name}': the check URL names a field that does not exist")
        if not is_https_or_loopback_http(re.sub(r"\{[a-z][a-z0-9_]*\}", "x", config.check.url)):
            raise ConfigurationError(f"api-key provider '{name}': the check URL must be https")
        if config.check.auth == "header" and not config.check.header:
            raise ConfigurationError(f"api-key provider '{name}': check auth 'header' needs 'header'")
        username = config.check.basic_username_field
        if username is not None and (config.check.auth != "basic" or username not in names):
            raise ConfigurationError(f"api-key provider '{name}': basic_username_field names no field of basic auth")
    return config


async def upsert_api_key_provider(
    session: AsyncSession, name: str, display_name: str, config: dict[str, Any], *, enabled: bool = True
) -> ApiKeyProvider:
    """Create or replace an API-key provider (refuses to turn an OAuth provider into one)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", name):
        raise ConfigurationError(f"provider name '{name}' must be lowercase letters, digits, '_', '.', '-'")
    parsed = parse_config(config, name=name)
    shown = [("display_name", display_name), ("key_label", parsed.key_label), ("help", parsed.help)]
    for extra in parsed.fields:
        shown += [("fields.label", extra.label), ("fields.help", extra.help), ("fields.example", extra.example)]
        shown += [("fields.choices", choice) for choice in extra.choices or ()]
    for field, value in shown:
        if (problem := display_text_problem(value, field)) is not None:
            raise ConfigurationError(f"api-key provider '{name}': {problem}")
    row = await session.execute(
        text(
            "INSERT INTO providers (name, display_name, client_id, token_auth_method, auth_type, api_key_config, "
            "enabled) VALUES (:name, :display, '', 'none', 'api_key', CAST(:config AS jsonb), :enabled) "
            "ON CONFLICT (name) DO UPDATE SET display_name = EXCLUDED.display_name, "
            "api_key_config = EXCLUDED.api_key_config, enabled = EXCLUDED.enabled, updated_at = now() "
            "WHERE providers.auth_type = 'api_key' RETURNING name"
        ),
        {"name": name, "display": display_name, "config": msgspec.json.encode(parsed).decode(), "enabled": enabled},
    )
    if row.first() is None:
        raise ConfigurationError(f"provider '{name}' exists as an OAuth provider")
    return ApiKeyProvider(name=name, display_name=display_name, enabled=enabled, config=parsed)


async def get_api_key_provider(session: AsyncSession, name: str) -> ApiKeyProvider | None:
    row = (
        await session.execute(
            text(
                "SELECT name, display_name, enabled, api_key_config FROM providers "
                "WHERE name = :name AND auth_type = 'api_key'"
            ),
            {"name": name},
        )
    ).first()
    if row is None:
        return None
    return ApiKeyProvider(
        name=row[0], display_name=row[1], enabled=row[2], config=parse_config(row[3] or {}, name=row[0])
    )


async def list_api_key_providers(session: AsyncSession) -> list[ApiKeyProvider]:
    rows = await session.execute(
        text(
            "SELECT name, display_name, enabled, api_key_config FROM providers WHERE auth_type = 'api_key' "
            "ORDER BY name"
        )
    )
    return [
        ApiKeyProvider(name=r[0], display_name=r[1], enabled=r[2], config=parse_config(r[3] or {}, name=r[0]))
        for r in rows
    ]
