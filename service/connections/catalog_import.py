"""Entries from a provider file in Nango's ``providers.yaml`` shape, for teams moving from it.

elicitd does not ship that file: an operator supplies the one they use, and each provider in it
becomes an elicitd entry document (``providers_catalog/schema.json``) where the two formats say
the same thing: endpoints (``${connectionConfig.x}`` placeholders become declared ``{x}``
parameters), authorization and token parameters, the scope separator, default scopes, token
answer metadata, the token request's client authentication, PKCE refused, and an API key's header
and verification request. What Nango's format cannot say — plain words for scopes, the account
probe — is left for the operator; ``elicitd providers lint`` names each gap. Providers of a mode
elicitd does not speak (OAuth 1, basic auth, app installs) are reported and skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_MODES = {"OAUTH2": "oauth2", "OAUTH2_CC": "oauth2_client_credentials", "API_KEY": "api_key"}
_CATEGORIES = {
    "dev-tools": "developer-tools",
    "developer-tools": "developer-tools",
    "productivity": "productivity",
    "knowledge-base": "productivity",
    "storage": "storage",
    "communication": "communication",
    "crm": "crm",
    "support": "support",
    "ticketing": "support",
    "e-commerce": "commerce",
    "ecommerce": "commerce",
    "payment": "payments",
    "accounting": "accounting",
    "marketing": "marketing",
    "social": "social",
    "video": "content",
    "design": "design",
    "identity": "identity",
    "iam": "identity",
    "ai": "ai",
    "monitoring": "monitoring",
    "observability": "monitoring",
    "cloud": "infrastructure",
}
_NANGO_PLACEHOLDER = re.compile(r"\$\{connectionConfig\.([A-Za-z][A-Za-z0-9_]*)\}")
_CREDENTIAL_PLACEHOLDER = re.compile(r"\$\{(?:apiKey|credentials\.([A-Za-z][A-Za-z0-9_]*))\}")
# What a connection parameter may hold when the file gives no pattern: one DNS label. Narrow on
# purpose (lint refuses a pattern that lets '/', '?', '#', '@' through).
DEFAULT_PATTERN = "^[A-Za-z0-9][A-Za-z0-9-]{0,62}$"
_SECRET_PATTERN = "^[\\x21-\\x7e]{8,512}$"


@dataclass
class Imported:
    key: str
    document: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()[:32]


def _template(url: str, used: set[str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = _snake(match.group(1))
        used.add(name)
        return "{" + name + "}"

    return _NANGO_PLACEHOLDER.sub(substitute, url)


def _url(value: Any, mode: str) -> str | None:
    """Nango gives an endpoint as a string, or as a table by auth mode."""
    if isinstance(value, dict):
        value = value.get(mode) or value.get("OAUTH2")
    return value if isinstance(value, str) else None


def _parameters(raw: dict[str, Any], used: set[str], notes: list[str]) -> dict[str, Any]:
    declared = {_snake(k): v for k, v in (raw.get("connection_config") or {}).items() if isinstance(v, dict)}
    parameters: dict[str, Any] = {}
    for name in sorted(used):
        spec = declared.get(name, {})
        pattern = spec.get("pattern")
        if not isinstance(pattern, str):
            notes.append(f"parameter {name}: no pattern in the file, given {DEFAULT_PATTERN}")
            pattern = DEFAULT_PATTERN
        parameter: dict[str, Any] = {
            "title": str(spec.get("title") or name.replace("_", " ").capitalize()),
            "pattern": pattern,
        }
        if isinstance(spec.get("example"), str):
            parameter["example"] = spec["example"]
        parameters[name] = parameter
    return parameters


def _api_key(raw: dict[str, Any], used: set[str], notes: list[str]) -> dict[str, Any] | None:
    proxy = raw.get("proxy") or {}
    verification = proxy.get("verification") or {}
    base = proxy.get("base_url")
    endpoints = verification.get("endpoints") or ([verification["endpoint"]] if verification.get("endpoint") else [])
    if not isinstance(base, str) or not endpoints:
        notes.append("no verification request in the file: an api_key entry needs one")
        return None
    fields: dict[str, Any] = {}

    def credential(match: re.Match[str]) -> str:
        name = _snake(match.group(1)) if match.group(1) else "api_key"
        fields.setdefault(
            name, {"title": name.replace("_", " ").capitalize(), "pattern": _SECRET_PATTERN, "secret": True}
        )
        return "{" + name + "}"

    headers = {
        str(k): _template(_CREDENTIAL_PLACEHOLDER.sub(credential, str(v)), used)
        for k, v in (verification.get("headers") or proxy.get("headers") or {}).items()
    }
    if not fields:
        notes.append("the file sends the key in no header elicitd can read")
        return None
    for name, spec in (raw.get("credentials") or {}).items():
        key = "api_key" if name == "apiKey" else _snake(name)
        if key in fields and isinstance(spec, dict):
            fields[key]["title"] = str(spec.get("title") or fields[key]["title"])
            if isinstance(spec.get("pattern"), str):
                fields[key]["pattern"] = spec["pattern"]
    url = _template(base.rstrip("/") + "/" + str(endpoints[0]).lstrip("/"), used)
    method = str(verification.get("method") or "GET").upper()
    return {
        "fields": fields,
        "verification": {"method": method if method in {"GET", "POST"} else "GET", "url": url, "headers": headers},
    }


def import_provider(key: str, raw: Any) -> Imported:  # noqa: PLR0912 - one branch per Nango field
    """One Nango provider as an elicitd entry document, with notes on what did not carry over."""
    notes: list[str] = []
    if not isinstance(raw, dict) or not isinstance(raw.get("display_name"), str):
        return Imported(key, None, ["not a provider table with a display_name"])
    nango_mode = str(raw.get("auth_mode", ""))
    mode = _MODES.get(nango_mode)
    if mode is None:
        return Imported(key, None, [f"auth mode {nango_mode or '(none)'} is not one elicitd speaks: skipped"])
    document: dict[str, Any] = {"display_name": raw["display_name"][:100]}
    categories = [_CATEGORIES[c] for c in raw.get("categories") or [] if c in _CATEGORIES]
    if categories:
        document["categories"] = sorted(set(categories))
    document["auth_mode"] = mode
    docs = raw.get("docs")
    document["source_url"] = docs if isinstance(docs, str) else "https://nango.dev/docs"
    used: set[str] = set()
    if mode == "api_key":
        api_key = _api_key(raw, used, notes)
        if api_key is not None:
            document["api_key"] = api_key
    else:
        endpoints: dict[str, str] = {}
        for ours, theirs in (("authorization", "authorization_url"), ("token", "token_url")):
            url = _url(raw.get(theirs), nango_mode)
            if url:
                endpoints[ours] = _template(url, used)
        if _url(raw.get("refresh_url"), nango_mode) not in (None, endpoints.get("token")):
            notes.append("a separate refresh URL is not carried over (elicitd refreshes at the token endpoint)")
        document["endpoints"] = endpoints
        if isinstance(raw.get("authorization_params"), dict):
            document["authorize_params"] = {
                str(k): v for k, v in raw["authorization_params"].items() if k not in {"response_type"}
            }
        request: dict[str, Any] = {
            "auth_method": "client_secret_basic"
            if raw.get("token_request_auth_method") == "basic"
            else "client_secret_post"
        }
        extra = {str(k): v for k, v in (raw.get("token_params") or {}).items() if k != "grant_type"}
        if extra:
            request["extra_params"] = extra
        if raw.get("body_format") == "json":
            notes.append("the token request's JSON body is not carried over (elicitd sends a form)")
        document["token_request"] = request
        if raw.get("disable_pkce") is True:
            document["pkce"] = "refused"
        if isinstance(raw.get("scope_separator"), str):
            document["scope_separator"] = raw["scope_separator"]
        if raw.get("default_scopes"):
            document["default_scopes"] = [str(s) for s in raw["default_scopes"]]
            notes.append("default scopes need plain words under scopes")
        metadata = [str(m) for m in raw.get("token_response_metadata") or []]
        if metadata:
            document["token_answer"] = {"metadata": metadata}
        notes.append("the account probe is not in Nango's format: add account (endpoint, id_field, login_field)")
    parameters = _parameters(raw, used, notes)
    if parameters:
        document["parameters"] = parameters
    return Imported(key, document, notes)


def import_nango(document: Any, only: set[str] | None = None) -> list[Imported]:
    """Every provider of a Nango ``providers.yaml`` document (or just the ``only`` ones), in order."""
    if not isinstance(document, dict):
        return [Imported("(file)", None, ["expected a table of providers at the top"])]
    return [import_provider(str(key), raw) for key, raw in document.items() if only is None or str(key) in only]
