"""The provider catalog as data: every built-in entry passes ``elicitd providers lint``, the lint
refuses each kind of mistake, operators' entries merge over the built-in ones, and a Nango-shaped
provider file becomes entries the lint names the gaps of."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli_exits import CommandFailed, ExitCode
from service.connections import cli
from service.connections.catalog import (
    BUILT_IN_DIR,
    CATALOG,
    PROVIDERS_DIR_VARIABLE,
    entry_files,
    fill_template,
    key_of,
    load_catalog,
)
from service.connections.catalog_import import DEFAULT_PATTERN, import_nango
from service.connections.catalog_lint import lint_document, lint_file
from service.errors import ConfigurationError

BUILT_IN = entry_files(BUILT_IN_DIR)


@pytest.mark.parametrize("path", BUILT_IN, ids=[p.name for p in BUILT_IN])
def test_every_built_in_entry_passes_the_lint(path: Path) -> None:
    assert lint_file(path) == []


def test_the_catalog_holds_every_file_and_sixty_providers() -> None:
    assert sorted(CATALOG) == sorted(key_of(p) for p in BUILT_IN)
    real = [e for e in CATALOG.values() if "generic" not in e.categories]
    assert len(real) >= 60
    assert all(e.source_url and e.source_url.startswith("https://") for e in CATALOG.values())


def _good() -> dict[str, Any]:
    return {
        "display_name": "Acme Desk",
        "categories": ["support"],
        "auth_mode": "oauth2",
        "source_url": "https://developer.acme.example/oauth",
        "parameters": {"subdomain": {"title": "Your Acme subdomain", "pattern": "^[a-z0-9-]{1,63}$", "example": "co"}},
        "endpoints": {
            "authorization": "https://{subdomain}.acme.example/oauth/authorize",
            "token": "https://{subdomain}.acme.example/oauth/token",
        },
        "default_scopes": ["read"],
        "scopes": {"read": "See your tickets"},
        "account": {"endpoint": "https://{subdomain}.acme.example/api/me", "id_field": "user.id"},
    }


def _api_key_entry() -> dict[str, Any]:
    return {
        "display_name": "Acme AI",
        "auth_mode": "api_key",
        "source_url": "https://docs.acme.example/auth",
        "api_key": {
            "fields": {"api_key": {"title": "API key", "pattern": "^sk-[A-Za-z0-9_-]{20,200}$", "secret": True}},
            "verification": {
                "url": "https://api.acme.example/v1/models",
                "headers": {"Authorization": "Bearer {api_key}"},
            },
        },
    }


def test_a_good_entry_passes() -> None:
    assert lint_document("acme", _good()) == []
    assert lint_document("acme-ai", _api_key_entry()) == []


def _with(change: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(base or _good()))
    for path, value in change.items():
        *parents, last = path.split("/")
        target = document
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return document


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"display_name": None}, "schema: (top): 'display_name' is a required property"),
        (
            {"token_url": "https://x.example/t"},
            "schema: (top): Additional properties are not allowed ('token_url' was unexpected)",
        ),
        ({"pkce": "sometimes"}, "schema: pkce: 'sometimes' is not one of ['required', 'supported', 'refused']"),
        (
            {"endpoints/token": "http://{subdomain}.acme.example/oauth/token"},
            "endpoints/token: must be an https URL with a host (no user or password)",
        ),
        (
            {"endpoints/token": "https://{region}.acme.example/oauth/token"},
            "endpoints/token: '{region}' is not declared under parameters",
        ),
        (
            {"parameters/subdomain/pattern": ".+"},
            "parameters/subdomain: the pattern lets '/', '?', '#', '@', a space or nothing through",
        ),
        (
            {"parameters/subdomain/pattern": "^[a-z]+$", "parameters/subdomain/example": "co-1"},
            "parameters/subdomain: its example or default does not match its pattern",
        ),
        (
            {"parameters/region": {"title": "Region", "pattern": "^(eu|us)$"}},
            "parameters/region: declared but used by no URL",
        ),
        ({"default_scopes": ["read", "write"]}, "scopes: 'write' is asked by default but has no plain words"),
        ({"account": None}, "account: the probe is missing (the endpoint and fields that name the account)"),
        ({"endpoints/authorization": None}, "endpoints: give an issuer or both the authorization and token endpoints"),
        ({"scopes/read": "See \u202eyour tickets"}, "`scopes/read` must be a single line of text"),
    ],
)
def test_the_lint_refuses_each_kind_of_mistake(change: dict[str, Any], expected: str) -> None:
    problems = lint_document("acme", _with(change))
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"api_key": None}, "api_key: an api_key entry needs its form fields and a verification request"),
        ({"api_key/fields/api_key/secret": False}, "api_key/fields: no field is marked secret"),
        (
            {"api_key/verification/url": "https://api.acme.example/v1/models?key={api_key}"},
            "api_key/verification/url: a secret field must travel in a header, not the URL",
        ),
        (
            {"api_key/verification/headers": {"Authorization": "Bearer {token}"}},
            "api_key/verification: '{token}' is not a declared field",
        ),
    ],
)
def test_the_lint_refuses_each_kind_of_api_key_mistake(change: dict[str, Any], expected: str) -> None:
    assert expected in lint_document("acme-ai", _with(change, _api_key_entry()))


def test_the_lint_refuses_a_bad_file_name_and_a_file_that_is_not_yaml(tmp_path: Path) -> None:
    assert lint_document("Acme Desk", _good()) == [
        "the file name 'Acme Desk' must be lowercase letters, digits, '_', '.', '-'"
    ]
    broken = tmp_path / "acme.yaml"
    broken.write_text("display_name: [unclosed\n")
    assert lint_file(broken) == ["provider entry acme.yaml: cannot be read (ParserError)"]
    assert lint_file(tmp_path / "acme.toml") == ["acme.toml: an entry file is named <key>.yaml"]


def test_a_parameter_is_checked_before_any_url_is_built() -> None:
    entry = load_catalog()["zendesk"]
    token = entry.token_endpoint or ""
    assert fill_template(token, entry.parameters, {"subdomain": "acme"}) == "https://acme.zendesk.com/oauth/tokens"
    for hostile in ("evil.com/x", "acme.evil.com#", "a@evil.com", ""):
        with pytest.raises(ConfigurationError, match="parameter 'subdomain'"):
            fill_template(token, entry.parameters, {"subdomain": hostile})


def _write(directory: Path, key: str, document: dict[str, Any]) -> Path:
    path = directory / f"{key}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_operator_entries_merge_over_the_built_in_ones(tmp_path: Path) -> None:
    _write(tmp_path, "acme", _good())
    own_github = _with({"display_name": "GitHub Enterprise (ours)"})
    _write(tmp_path, "github", own_github)
    merged = load_catalog(tmp_path)
    assert merged["acme"].built_in is False
    assert merged["acme"].parameters["subdomain"].pattern == "^[a-z0-9-]{1,63}$"
    assert merged["github"].display_name == "GitHub Enterprise (ours)"
    assert merged["github"].built_in is False
    assert merged["google"] == CATALOG["google"]


def test_an_operator_entry_that_fails_the_lint_stops_the_start(tmp_path: Path) -> None:
    _write(tmp_path, "acme", _with({"endpoints/token": "http://{subdomain}.acme.example/t"}))
    with pytest.raises(ConfigurationError, match=r"provider entry acme.yaml: endpoints/token: must be an https URL"):
        load_catalog(tmp_path)
    with pytest.raises(ConfigurationError, match="is not a directory"):
        load_catalog(tmp_path / "missing")


def test_the_lint_command_checks_files_and_fails_with_their_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PROVIDERS_DIR_VARIABLE, raising=False)
    cli.cmd_lint(argparse.Namespace(files=[], json=True))
    assert json.loads(capsys.readouterr().out) == {"checked": len(BUILT_IN), "problems": []}
    bad = _write(tmp_path, "acme", _with({"account": None}))
    with pytest.raises(CommandFailed) as failed:
        cli.cmd_lint(argparse.Namespace(files=[str(bad)], json=False))
    assert failed.value.code == ExitCode.REFUSED
    assert (
        failed.value.message
        == "acme.yaml: account: the probe is missing (the endpoint and fields that name the account)"
    )


def test_the_catalog_command_lists_each_entry_with_its_setup_link(capsys: pytest.CaptureFixture[str]) -> None:
    cli.cmd_catalog(argparse.Namespace(json=True))
    rows = {row["catalog"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["github"]["setup_url"] == "https://github.com/settings/applications/new"
    assert rows["github"]["needs"] == "client id, secret"
    assert rows["zendesk"]["needs"] == "client id, secret, {subdomain}"
    assert rows["openai"]["auth_mode"] == "api_key"
    assert rows["openai"]["needs"] == "the user's key"
    assert {row["origin"] for row in rows.values()} == {"built-in"}


def test_add_from_a_file_needs_a_clean_lint_and_the_providers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _write(tmp_path, "acme", _with({"scopes": None}))
    with pytest.raises(CommandFailed, match="'read' is asked by default but has no plain words"):
        cli._entry_from_file(str(bad))
    good = _write(tmp_path, "acme", _good())
    monkeypatch.delenv(PROVIDERS_DIR_VARIABLE, raising=False)
    with pytest.raises(CommandFailed, match=f"--from needs {PROVIDERS_DIR_VARIABLE}"):
        cli._entry_from_file(str(good))
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv(PROVIDERS_DIR_VARIABLE, str(shared))
    monkeypatch.setitem(CATALOG, "acme", CATALOG["oauth2"])  # restored after the test
    assert cli._entry_from_file(str(good)) == "acme"
    assert (shared / "acme.yaml").read_text() == good.read_text()
    assert CATALOG["acme"].display_name == "Acme Desk"
    assert load_catalog(shared)["acme"] == CATALOG["acme"]


# A provider file in Nango's documented providers.yaml shape, written for this test.
NANGO_FILE = """
acme-desk:
    display_name: Acme Desk
    categories: [ticketing, crm]
    auth_mode: OAUTH2
    authorization_url: https://${connectionConfig.subdomain}.acme.example/oauth/authorize
    token_url: https://${connectionConfig.subdomain}.acme.example/oauth/token
    authorization_params:
        prompt: consent
        response_type: code
    token_params:
        grant_type: authorization_code
    token_request_auth_method: basic
    scope_separator: ','
    default_scopes: [read]
    token_response_metadata: [instance_url]
    disable_pkce: true
    connection_config:
        subdomain:
            type: string
            title: Subdomain
            pattern: '^[a-z0-9-]{1,63}$'
            example: co
    docs: https://nango.dev/docs/api-integrations/acme-desk
acme-ai:
    display_name: Acme AI
    categories: [ai]
    auth_mode: API_KEY
    proxy:
        base_url: https://api.acme.example
        headers:
            authorization: Bearer ${apiKey}
        verification:
            method: GET
            endpoints: [/v1/models]
    credentials:
        apiKey:
            type: string
            title: API Key
            pattern: '^sk-[A-Za-z0-9_-]{20,200}$'
    docs: https://nango.dev/docs/api-integrations/acme-ai
acme-legacy:
    display_name: Acme Legacy
    auth_mode: OAUTH1
"""


def test_a_nango_file_becomes_entries_with_the_gaps_named() -> None:
    imported = {i.key: i for i in import_nango(yaml.safe_load(NANGO_FILE))}
    desk = imported["acme-desk"].document
    assert desk is not None
    assert desk["endpoints"] == {
        "authorization": "https://{subdomain}.acme.example/oauth/authorize",
        "token": "https://{subdomain}.acme.example/oauth/token",
    }
    assert desk["parameters"] == {"subdomain": {"title": "Subdomain", "pattern": "^[a-z0-9-]{1,63}$", "example": "co"}}
    assert desk["authorize_params"] == {"prompt": "consent"}
    assert desk["token_request"] == {"auth_method": "client_secret_basic"}
    assert desk["pkce"] == "refused"
    assert desk["scope_separator"] == ","
    assert desk["token_answer"] == {"metadata": ["instance_url"]}
    assert desk["categories"] == ["crm", "support"]
    assert lint_document("acme-desk", desk) == [
        "account: the probe is missing (the endpoint and fields that name the account)",
        "scopes: 'read' is asked by default but has no plain words",
    ]
    ai = imported["acme-ai"].document
    assert ai is not None
    assert ai["api_key"]["verification"] == {
        "method": "GET",
        "url": "https://api.acme.example/v1/models",
        "headers": {"authorization": "Bearer {api_key}"},
    }
    assert ai["api_key"]["fields"]["api_key"]["secret"] is True
    assert lint_document("acme-ai", ai) == []
    assert imported["acme-legacy"].document is None
    assert imported["acme-legacy"].notes == ["auth mode OAUTH1 is not one elicitd speaks: skipped"]


def test_a_nango_parameter_without_a_pattern_gets_a_narrow_one() -> None:
    (imported,) = import_nango(
        {
            "x": {
                "display_name": "X",
                "auth_mode": "OAUTH2",
                "token_url": "https://${connectionConfig.shopName}.x.example/t",
            }
        }
    )
    assert imported.document is not None
    assert imported.document["parameters"] == {"shop_name": {"title": "Shop name", "pattern": DEFAULT_PATTERN}}
    assert f"parameter shop_name: no pattern in the file, given {DEFAULT_PATTERN}" in imported.notes


def test_the_import_command_writes_each_entry_into_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "providers.yaml"
    source.write_text(NANGO_FILE)
    into = tmp_path / "entries"
    into.mkdir()
    cli.cmd_import_nango(argparse.Namespace(file=str(source), into=str(into), only=None, replace=False, json=True))
    rows = {row["key"]: row for row in json.loads(capsys.readouterr().out)}
    assert {k: r["written"] for k, r in rows.items()} == {"acme-desk": True, "acme-ai": True, "acme-legacy": False}
    assert sorted(p.name for p in into.iterdir()) == ["acme-ai.yaml", "acme-desk.yaml"]
    assert lint_file(into / "acme-ai.yaml") == []
    assert [p.removeprefix("acme-desk.yaml: ") for p in lint_file(into / "acme-desk.yaml")] == rows["acme-desk"][
        "problems"
    ]
