"""``elicitd providers lint``: what a catalog entry must be before anyone connects through it.

The JSON Schema (``providers_catalog/schema.json``) says the shape; the rules here say what a
schema cannot: every URL is https (a client secret, a code and a PKCE verifier go to these
addresses), every ``{placeholder}`` is declared with a pattern that keeps a value inside its place
(no ``/``, ``?``, ``#``, ``@`` or space slipping a host or a path in), every scope asked by default
has plain words, and each entry names how its account is found (the probe) or, for an API key, how
the key is checked. The suite lints every built-in entry (tests/connections/test_catalog_lint.py).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from service.connections.catalog_files import KEY_PATTERN, SCHEMA_PATH, key_of, placeholders, read_document
from service.errors import ConfigurationError
from service.text import display_text_problem

# What a metadata name may not look like: metadata reaches MCP servers and logs' neighbours, so a
# token, a secret or a code is never kept as one.
SECRET_NAME = re.compile(r"token|secret|password|private|signing", re.IGNORECASE)
# Values a parameter's pattern must refuse: each would move a templated value out of its place.
_ESCAPES = ("a/b", "a?b", "a#b", "a@b", "a b", "a\\b", "")


@cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _where(error: Any) -> str:
    return "/".join(str(part) for part in error.absolute_path) or "(top)"


def _urls(doc: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(name, doc[name]) for name in ("source_url", "setup_url", "issuer") if isinstance(doc.get(name), str)]
    found += [(f"endpoints/{k}", v) for k, v in (doc.get("endpoints") or {}).items()]
    account = doc.get("account") or {}
    if account.get("endpoint"):
        found.append(("account/endpoint", account["endpoint"]))
    verification = (doc.get("api_key") or {}).get("verification") or {}
    if verification.get("url"):
        found.append(("api_key/verification/url", verification["url"]))
    found += [(f"lookups/{i}/endpoint", lookup["endpoint"]) for i, lookup in enumerate(doc.get("lookups") or ())]
    return found


def _metadata_problems(doc: dict[str, Any]) -> list[str]:
    """Metadata is handed to MCP servers beside the token: it never names a secret."""
    named = [("token_answer/metadata", path) for path in (doc.get("token_answer") or {}).get("metadata") or ()]
    for i, lookup in enumerate(doc.get("lookups") or ()):
        named += [(f"lookups/{i}/metadata", f"{name} {path}") for name, path in lookup["metadata"].items()]
    return [f"{where}: '{text}' looks like a secret" for where, text in named if SECRET_NAME.search(text)]


def _pattern_problems(where: str, name: str, spec: dict[str, Any]) -> list[str]:
    try:
        compiled = re.compile(spec["pattern"])
    except re.error:
        return [f"{where}/{name}: the pattern is not a regular expression"]
    problems = []
    if not spec.get("secret") and any(compiled.fullmatch(value) for value in _ESCAPES):
        problems.append(f"{where}/{name}: the pattern lets '/', '?', '#', '@', a space or nothing through")
    for example in (spec.get("example"), spec.get("default")):
        if example is not None and not compiled.fullmatch(example):
            problems.append(f"{where}/{name}: its example or default does not match its pattern")
    return problems


def _url_problems(doc: dict[str, Any], parameters: dict[str, Any]) -> list[str]:

    problems: list[str] = []
    used: set[str] = set()
    # An API key form's plain (not secret) fields may place a request too: Datadog's site.
    declared = {**((doc.get("api_key") or {}).get("fields") or {}), **parameters}
    for where, url in _urls(doc):
        names = placeholders(url)
        used.update(names)
        problems += [f"{where}: '{{{n}}}' is not declared under parameters" for n in names if n not in declared]
        sample = re.sub(r"\{([a-z0-9_]+)\}", lambda m: str((declared.get(m.group(1)) or {}).get("example") or "x"), url)
        parts = urlsplit(sample)
        # A documentation page may carry a fragment; an address elicitd calls may not.
        fragment_ok = where in {"source_url", "setup_url"}
        if parts.scheme != "https" or not parts.hostname or parts.username or parts.password:
            problems.append(f"{where}: must be an https URL with a host (no user or password)")
        elif parts.fragment and not fragment_ok:
            problems.append(f"{where}: an endpoint has no fragment")
    problems += [f"parameters/{name}: declared but used by no URL" for name in sorted(set(parameters) - used)]
    return problems


def _api_key_problems(doc: dict[str, Any], parameters: dict[str, Any]) -> list[str]:

    api_key = doc.get("api_key")
    if api_key is None:
        return ["api_key: an api_key entry needs its form fields and a verification request"]
    problems: list[str] = []
    fields = api_key["fields"]
    if not any(spec.get("secret") for spec in fields.values()):
        problems.append("api_key/fields: no field is marked secret")
    for name, spec in fields.items():
        problems += _pattern_problems("api_key/fields", name, spec)
    verification = api_key["verification"]
    basic = verification.get("basic_auth") or {}
    texts = [verification["url"], *(verification.get("headers") or {}).values(), *basic.values()]
    for text in texts:
        problems += [
            f"api_key/verification: '{{{name}}}' is not a declared field"
            for name in placeholders(text)
            if name not in fields and name not in parameters
        ]
    if any(fields.get(n, {}).get("secret") for n in placeholders(verification["url"])):
        problems.append("api_key/verification/url: a secret field must travel in a header, not the URL")
    return problems


def _oauth_problems(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if doc.get("api_key") is not None:
        problems.append("api_key: only an api_key entry has a key form")
    endpoints = doc.get("endpoints") or {}
    generic = "generic" in (doc.get("categories") or [])
    if not generic and not doc.get("issuer") and not (endpoints.get("authorization") and endpoints.get("token")):
        problems.append("endpoints: give an issuer or both the authorization and token endpoints")
    if doc["auth_mode"] == "oauth2_client_credentials" and not endpoints.get("token"):
        problems.append("endpoints/token: client credentials need a token endpoint")
    if doc.get("account") is None:
        problems.append("account: the probe is missing (the endpoint and fields that name the account)")
    server = doc.get("token_server")
    if server is not None and server["callback_param"] not in (doc.get("callback_params") or ()):
        problems.append("token_server/callback_param: it must be one of callback_params")
    return problems + _metadata_problems(doc)


def _words_problems(doc: dict[str, Any], parameters: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    descriptions: dict[str, Any] = doc.get("scopes") or {}
    separator = doc.get("scope_separator", " ")
    for scope in doc.get("default_scopes") or []:
        if scope not in descriptions:
            problems.append(f"scopes: '{scope}' is asked by default but has no plain words")
        if separator.strip() and separator in scope:
            problems.append(f"default_scopes: '{scope}' contains the scope separator")
    texts = [("display_name", doc["display_name"])] + [(f"scopes/{s}", w) for s, w in descriptions.items()]
    texts += [(f"parameters/{n}/title", p["title"]) for n, p in parameters.items()]
    texts += [
        (f"api_key/fields/{n}/title", p["title"]) for n, p in ((doc.get("api_key") or {}).get("fields") or {}).items()
    ]
    return problems + [problem for where, text in texts if (problem := display_text_problem(text, where)) is not None]


def lint_document(key: str, doc: Any) -> list[str]:
    """Every problem of one entry, in words an operator can act on; empty when it is fine."""

    if not KEY_PATTERN.fullmatch(key):
        return [f"the file name '{key}' must be lowercase letters, digits, '_', '.', '-'"]
    if not isinstance(doc, dict):
        return ["expected a mapping at the top"]
    schema_errors = sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if schema_errors:
        return [f"schema: {_where(e)}: {e.message}" for e in schema_errors]
    parameters: dict[str, Any] = doc.get("parameters") or {}
    problems: list[str] = []
    for name, spec in parameters.items():
        problems += _pattern_problems("parameters", name, spec)
    problems += _url_problems(doc, parameters)
    problems += _api_key_problems(doc, parameters) if doc["auth_mode"] == "api_key" else _oauth_problems(doc)
    return problems + _words_problems(doc, parameters)


def lint_file(path: Path) -> list[str]:
    """Problems of one file, each prefixed by the file's name."""

    if path.suffix != ".yaml":
        return [f"{path.name}: an entry file is named <key>.yaml"]
    try:
        document = read_document(path)
    except ConfigurationError as exc:
        return [str(exc)]
    return [f"{path.name}: {problem}" for problem in lint_document(key_of(path), document)]
