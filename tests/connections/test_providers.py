"""Providers as data: catalog defaults, validation, encrypted client secrets, discovery, the CLI
and the config file section."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from service.config_file import apply_config
from service.connections.catalog import CATALOG
from service.connections.discovery import DiscoveryFailed, MetadataCache
from service.connections.providers import (
    ProviderSpec,
    get_provider,
    public_view,
    resolve,
    spec_from_mapping,
    spec_values,
    upsert_provider,
)
from service.crypto.vault import Vault
from service.errors import ConfigurationError
from service.identity.issuers import IssuerDirectory, IssuerUnavailable
from service.settings import Settings
from tests.conftest import TEST_KEYS
from tests.connections.conftest import Env
from tests.support.oauth_server import OAuthServer

VAULT = Vault(TEST_KEYS)


@pytest.mark.parametrize(
    "key",
    [
        k
        for k, e in CATALOG.items()
        if not e.needs_issuer and k != "oauth2" and e.auth_mode != "api_key" and not e.parameters
    ],
)
def test_catalog_entries_need_only_client_id_and_secret(key: str) -> None:
    values = spec_values(ProviderSpec(name=key, client_id="id", client_secret="s3cret"), VAULT)
    assert values["catalog"] == key
    assert values["display_name"] == CATALOG[key].display_name
    assert values["authorization_endpoint"] or values["issuer"]
    assert values["client_secret_enc"] is not None and b"s3cret" not in values["client_secret_enc"]


@pytest.mark.parametrize("key", [k for k, e in CATALOG.items() if e.parameters and e.auth_mode != "api_key"])
def test_a_templated_entry_needs_its_parameters_and_fills_every_endpoint(key: str) -> None:
    entry = CATALOG[key]
    given = {name: p.example or p.default or "" for name, p in entry.parameters.items()}
    values = spec_values(ProviderSpec(name=key, client_id="id", client_secret="s", parameters=given), VAULT)
    for field in ("issuer", "authorization_endpoint", "token_endpoint", "revocation_endpoint", "account_endpoint"):
        assert "{" not in (values[field] or ""), field
    required = [name for name, p in entry.parameters.items() if p.default is None]
    in_issuer = [name for name in required if entry.issuer and "{" + name + "}" in entry.issuer]
    if in_issuer:
        # An issuer's metadata is discovered for the provider: the operator gives its parameters.
        with pytest.raises(ConfigurationError, match=f"parameter '{in_issuer[0]}' is required"):
            spec_values(ProviderSpec(name=key, client_id="id", client_secret="s"), VAULT)
    elif required:
        # Left to each connection: the endpoints keep the placeholders (``with_parameters``).
        left = spec_values(ProviderSpec(name=key, client_id="id", client_secret="s"), VAULT)
        assert "{" + required[0] + "}" in left["authorization_endpoint"] + left["token_endpoint"]
    with pytest.raises(ConfigurationError, match="does not match its pattern"):
        spec_values(
            ProviderSpec(name=key, client_id="id", client_secret="s", parameters={**given, next(iter(given)): "a/b"}),
            VAULT,
        )


def test_zendesk_is_made_for_one_subdomain() -> None:
    spec = ProviderSpec(name="zendesk", client_id="id", client_secret="s", parameters={"subdomain": "acme"})
    values = spec_values(spec, VAULT)
    assert values["token_endpoint"] == "https://acme.zendesk.com/oauth/tokens"
    assert values["account_endpoint"] == "https://acme.zendesk.com/api/v2/users/me.json"
    with pytest.raises(ConfigurationError, match="unknown parameters shop"):
        spec_values(ProviderSpec(name="zendesk", client_id="id", client_secret="s", parameters={"shop": "x"}), VAULT)


def test_the_config_file_gives_an_entrys_parameters() -> None:
    spec = spec_from_mapping(
        "zendesk", {"client_id": "zd", "client_secret_env": "ZD", "parameters": {"subdomain": "acme"}}, {"ZD": "s"}
    )
    assert spec.parameters == {"subdomain": "acme"}
    assert spec_values(spec, VAULT)["authorization_endpoint"] == "https://acme.zendesk.com/oauth/authorizations/new"


def test_an_api_key_service_is_not_an_oauth_provider() -> None:
    with pytest.raises(ConfigurationError, match="'openai' is an API key service"):
        spec_values(ProviderSpec(name="openai", client_id="id", client_secret="s"), VAULT)


def test_catalog_has_the_well_known_providers() -> None:
    assert {"github", "google", "slack", "microsoft", "atlassian", "notion", "linear", "oidc", "oauth2"} <= set(CATALOG)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ProviderSpec(name="oidc", client_id="id", client_secret="s"), "issuer"),
        (ProviderSpec(name="github", client_id="id"), "client secret is required"),
        (ProviderSpec(name="github", client_id=""), "client id"),
        (ProviderSpec(name="Bad Name", client_id="id", client_secret="s", catalog="github"), "lowercase"),
        (ProviderSpec(name="x", client_id="id", client_secret="s", catalog="nope"), "unknown catalog"),
        (
            ProviderSpec(
                name="x",
                client_id="id",
                client_secret="s",
                authorization_endpoint="http://evil.example/a",
                token_endpoint="https://t.example/t",
            ),
            "https",
        ),
    ],
)
def test_invalid_specs_are_refused_with_a_reason(spec: ProviderSpec, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        spec_values(spec, VAULT)


async def test_secret_is_stored_encrypted_and_never_shown(env: Env) -> None:
    name = f"gh-{uuid.uuid4().hex[:6]}"
    async with env.app.state.sessions() as session:
        row = await upsert_provider(
            session,
            ProviderSpec(name=name, catalog="github", client_id="cid", client_secret="github-secret-value"),
            env.app.state.vault,
        )
        await session.commit()
        raw = (
            await session.execute(text("SELECT row_to_json(p)::text FROM providers p WHERE name = :n"), {"n": name})
        ).scalar_one()
    assert "github-secret-value" not in raw and b"github-secret-value".hex() not in raw
    view = public_view(row)
    assert view["has_client_secret"] is True
    assert "github-secret-value" not in str(view)
    resolved = await resolve(row, env.app.state.vault, MetadataCache())
    assert resolved.client_secret == "github-secret-value"
    assert "github-secret-value" not in repr(resolved)
    assert resolved.token_endpoint == "https://github.com/login/oauth/access_token"


async def test_discovery_fills_endpoints_and_checks_the_issuer(env: Env, oauth: OAuthServer) -> None:
    async with env.app.state.sessions() as session:
        row = await get_provider(session, env.provider)
    assert row is not None and row.authorization_endpoint is None
    resolved = await resolve(row, env.app.state.vault, MetadataCache())
    assert resolved.authorization_endpoint == oauth.authorization_endpoint
    assert resolved.token_endpoint == oauth.token_endpoint
    assert resolved.revocation_endpoint == oauth.revocation_endpoint
    assert resolved.iss_parameter_supported is True
    with pytest.raises(DiscoveryFailed):
        # The document at this URL names another issuer: refused, not used.
        await MetadataCache().get(oauth.issuer + "/other", discovery_url=oauth.discovery_url)


async def test_one_metadata_fetch_checks_the_issuer_for_providers_and_issuers(env: Env, oauth: OAuthServer) -> None:
    """Providers and sign-in issuers fetch metadata through one function: the same document is
    taken for a provider configured with a final ``/`` (as providers always were), and refused for
    a sign-in issuer, whose ``issuer`` must match to the letter (OIDC Discovery §4.3)."""
    slashed = oauth.issuer + "/"
    document = await MetadataCache().get(slashed, discovery_url=oauth.discovery_url)
    assert document["issuer"] == oauth.issuer
    directory = IssuerDirectory(env.app.state.sessions, env.app.state.vault)
    try:
        assert (await directory.discover(oauth.issuer))["issuer"] == oauth.issuer
        with pytest.raises(IssuerUnavailable) as refused:
            await directory.discover(slashed)
        assert refused.value.detail == "The sign-in service's metadata names another issuer."
    finally:
        await directory.close()


async def test_config_file_section(env: Env) -> None:
    first, second = f"cfg-{uuid.uuid4().hex[:6]}", f"cfg-{uuid.uuid4().hex[:6]}"
    data = {
        "providers": [
            {"name": first, "catalog": "linear", "client_id": "lin", "client_secret_env": "LIN_SECRET"},
            {
                "name": second,
                "catalog": "github",
                "client_id": "gh",
                "client_secret_env": "GH_SECRET",
                "display_name": "GitHub (work)",
                "default_scopes": ["repo"],
            },
        ]
    }
    counts = await apply_config(
        env.app.state.sessions, env.app.state.vault, data, {"LIN_SECRET": "lin-s", "GH_SECRET": "gh-s"}
    )
    assert counts["providers"] == 2
    async with env.app.state.sessions() as session:
        row = await get_provider(session, second)
    assert row is not None
    assert (row.display_name, list(row.default_scopes), row.client_id) == ("GitHub (work)", ["repo"], "gh")
    with pytest.raises(ConfigurationError, match="NOPE"):
        await apply_config(
            env.app.state.sessions,
            env.app.state.vault,
            {"providers": {first: {"client_id": "x", "client_secret_env": "NOPE"}}},
            {},
        )
    with pytest.raises(ConfigurationError, match="client_secret_env"):
        await apply_config(
            env.app.state.sessions,
            env.app.state.vault,
            {"providers": {first: {"client_id": "x", "client_secret": "inline"}}},
            {},
        )


def _cli(
    settings: Settings, *args: str, stdin: str | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_PUBLIC_URL": settings.public_url,
        "ELICITD_KEYS": ",".join(
            f"{k}:{base64.urlsafe_b64encode(v).decode().rstrip('=')}" for k, v in settings.keys.keys
        ),
        **(extra_env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )


async def test_cli_add_list_disable(make_settings: Callable[..., Settings], env: Env) -> None:
    settings = make_settings(public_url="http://127.0.0.1:8000")
    name = f"cli-{uuid.uuid4().hex[:6]}"
    added = await asyncio.to_thread(
        _cli,
        settings,
        "providers",
        "add",
        name,
        "--catalog",
        "github",
        "--client-id",
        "abc",
        "--client-secret-stdin",
        stdin="cli-secret-value\n",
    )
    assert added.returncode == 0, added.stderr
    assert "cli-secret-value" not in added.stdout + added.stderr
    listed = await asyncio.to_thread(_cli, settings, "providers", "list", "--json")
    assert listed.returncode == 0
    assert "cli-secret-value" not in listed.stdout
    mine = [p for p in json.loads(listed.stdout) if p["name"] == name]
    assert mine and mine[0]["has_client_secret"] is True and mine[0]["enabled"] is True
    disabled = await asyncio.to_thread(_cli, settings, "providers", "disable", name)
    assert disabled.returncode == 0
    async with env.app.state.sessions() as session:
        row = await get_provider(session, name)
    assert row is not None and row.enabled is False
    missing = await asyncio.to_thread(_cli, settings, "providers", "disable", "no-such-provider")
    assert missing.returncode == 1 and "no provider" in missing.stderr  # not found
    no_secret = await asyncio.to_thread(
        _cli, settings, "providers", "add", "x-" + name, "--catalog", "github", "--client-id", "abc"
    )
    assert no_secret.returncode == 3 and "client secret is required" in no_secret.stderr  # configuration
