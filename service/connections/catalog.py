"""Well-known providers, so an operator needs only a client id and secret.

The catalog is data: one YAML file per provider in ``providers_catalog/`` (the file's name is the
entry's key), in the shape ``providers_catalog/schema.json`` describes, each written from the
provider's own documentation (its ``source_url``). An entry holds what rarely changes: endpoints
(or the issuer to discover them from), how the token request is made and its answer read, refresh
and PKCE behaviour, how the account is identified, how scopes are joined, and plain words for
common scopes (shown on the connect page; people approve words, not scope strings; the words are
extracted into the pages' catalogues by ``service.connections.catalog_words``).

Operators add or replace entries with files of the same shape in ``ELICITD_PROVIDERS_DIR``. The
catalog is read once, when the process starts (this module's import): the token endpoint's hot
path never touches a file. Built-in files are checked by ``elicitd providers lint`` in the suite,
so loading them trusts their shape; an operator's file is linted as it is loaded, and a bad one
stops the start with the lint's words. Anything here can still be overridden per provider in the
database, the config file or the CLI.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from service.connections.catalog_files import (
    BUILT_IN_DIR,
    KEY_PATTERN,
    PLACEHOLDER,
    PROVIDERS_DIR_VARIABLE,
    SCHEMA_PATH,
    entry_files,
    key_of,
    placeholders,
    read_document,
)
from service.errors import ConfigurationError
from service.i18n import _, current

__all__ = [
    "BUILT_IN_DIR",
    "CATALOG",
    "KEY_PATTERN",
    "PLACEHOLDER",
    "PROVIDERS_DIR_VARIABLE",
    "SCHEMA_PATH",
    "ApiKeySpec",
    "CatalogEntry",
    "Lookup",
    "Parameter",
    "TokenAnswer",
    "TokenServer",
    "Verification",
    "describe_scope",
    "dig",
    "entry_files",
    "entry_from_document",
    "fill_template",
    "fill_url",
    "key_of",
    "load_catalog",
    "placeholders",
    "read_document",
]


@dataclass(frozen=True, slots=True)
class Parameter:
    """A value a URL is templated from (or an API key form's field): checked by ``pattern``
    (matched in full) before it is used anywhere."""

    title: str
    pattern: str
    example: str | None = None
    default: str | None = None
    secret: bool = False

    def accepts(self, value: str) -> bool:
        return re.fullmatch(self.pattern, value) is not None


@dataclass(frozen=True, slots=True)
class TokenAnswer:
    """Where a token answer keeps each value (dotted paths), and how it is encoded."""

    format: str = "json"
    access_token: str = "access_token"
    refresh_token: str = "refresh_token"
    expires_in: str = "expires_in"
    scope: str = "scope"
    error: str = "error"
    # Values the connection keeps beside the tokens (Salesforce's ``instance_url``).
    metadata: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TokenServer:
    """The server a provider's callback names for the token calls (Zoho's ``accounts-server``, one
    per data centre): its token, refresh and revocation requests go to that origin, only when it
    is ``https`` (loopback ``http`` in development) on one of ``hosts`` exactly, with no path,
    port or credentials."""

    callback_param: str
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Lookup:
    """A request made with the new access token right after the code exchange (Xero's tenant list,
    Atlassian's accessible resources): ``metadata`` names the values kept from its JSON answer
    (dotted paths; a number indexes a list) beside the tokens."""

    endpoint: str
    metadata: dict[str, str]
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verification:
    """The request that decides whether an API key is accepted: ``{field}`` placeholders in the
    URL and headers are filled from the form (each checked by its pattern first)."""

    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    accept_status: tuple[int, ...] = (200,)
    refuse_status: tuple[int, ...] = (401, 403)
    # HTTP basic authentication from the form (Twilio's account SID and auth token; Freshdesk's
    # key with any password): ``(username, password)`` templates.
    basic_auth: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ApiKeySpec:
    fields: dict[str, Parameter]
    verification: Verification


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    key: str
    display_name: str
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    # Where a refresh token is spent when not at the token endpoint (Figma).
    refresh_endpoint: str | None = None
    # The account probe (DESIGN §11): the endpoint that names the account, and a dotted path into
    # its JSON (or, without an endpoint, the token response) for the id and the readable login.
    account_endpoint: str | None = None
    account_id_field: str = "id"
    account_login_field: str | None = None
    account_method: str = "GET"
    account_headers: dict[str, str] = field(default_factory=dict)
    token_auth_method: str = "client_secret_basic"
    default_scopes: tuple[str, ...] = ()
    scope_separator: str = " "
    scope_descriptions: dict[str, str] = field(default_factory=dict)
    authorize_params: dict[str, Any] = field(default_factory=dict)
    needs_issuer: bool = False
    # Whether the provider issues a second, separate token set for the same app and user (so a
    # server can be connected with just the scopes it asked while another holds more). Where it
    # cannot, the grant page does not offer "Connect separately" (DESIGN §10).
    second_token_set: bool = True
    auth_mode: str = "oauth2"
    categories: tuple[str, ...] = ()
    source_url: str | None = None
    setup_url: str | None = None
    # Values the endpoints are templated from, each with the pattern it must match.
    parameters: dict[str, Parameter] = field(default_factory=dict)
    # PKCE as the provider documents it: required, supported, refused; None when it does not say
    # (elicitd then sends S256 anyway, as it always has).
    pkce: str | None = None
    token_accept: str | None = None
    # How the token request's parameters travel: a form (RFC 6749) or a JSON object (Square).
    token_body: str = "form"
    token_headers: dict[str, str] = field(default_factory=dict)
    token_extra_params: dict[str, Any] = field(default_factory=dict)
    # The name the client id travels under (TikTok's ``client_key``).
    client_id_param: str = "client_id"
    token_answer: TokenAnswer = field(default_factory=TokenAnswer)
    callback_params: tuple[str, ...] = ()
    # The callback parameter holding the HMAC-SHA256 (hex, keyed with the client secret) of the
    # callback's other parameters, sorted and joined as ``k=v&k=v`` (Shopify's ``hmac``).
    callback_hmac: str | None = None
    # none: no refresh tokens are issued; reuse: a refresh answer may omit the refresh token (the
    # old one stays); rotating: every refresh answer carries a new one and the old one dies.
    refresh_mode: str = "reuse"
    refresh_token_expires: bool = False
    api_key: ApiKeySpec | None = None
    # The name the scopes travel under in the authorization request (Slack's ``user_scope`` for a
    # token acting as the person).
    scope_param: str = "scope"
    token_server: TokenServer | None = None
    lookups: tuple[Lookup, ...] = ()
    built_in: bool = True

    def open_parameters(self) -> dict[str, Parameter]:
        """The parameters a connection supplies itself (no default): the MCP server in the flow
        request, or the person on the connect page."""
        return {name: p for name, p in self.parameters.items() if p.default is None}


def _parameter(raw: dict[str, Any]) -> Parameter:
    return Parameter(
        title=str(raw["title"]),
        pattern=str(raw["pattern"]),
        example=raw.get("example"),
        default=raw.get("default"),
        secret=bool(raw.get("secret", False)),
    )


def _lookup(raw: dict[str, Any]) -> Lookup:
    return Lookup(
        endpoint=str(raw["endpoint"]),
        metadata={str(k): str(v) for k, v in raw["metadata"].items()},
        method=str(raw.get("method", "GET")),
        headers=dict(raw.get("headers") or {}),
    )


def _basic(raw: dict[str, str] | None) -> tuple[str, str] | None:
    return None if raw is None else (str(raw["username"]), str(raw["password"]))


def entry_from_document(key: str, doc: dict[str, Any], *, built_in: bool = True) -> CatalogEntry:
    """A schema-valid document (``schema.json``) as the object the rest of the code uses."""
    endpoints = doc.get("endpoints") or {}
    account = doc.get("account") or {}
    token_request = doc.get("token_request") or {}
    answer = doc.get("token_answer") or {}
    refresh = doc.get("refresh") or {}
    api_key = doc.get("api_key")
    server = doc.get("token_server")
    return CatalogEntry(
        key=key,
        display_name=str(doc["display_name"]),
        issuer=doc.get("issuer"),
        authorization_endpoint=endpoints.get("authorization"),
        token_endpoint=endpoints.get("token"),
        revocation_endpoint=endpoints.get("revocation"),
        refresh_endpoint=endpoints.get("refresh"),
        account_endpoint=account.get("endpoint"),
        account_id_field=str(account.get("id_field", "id")),
        account_login_field=account.get("login_field"),
        account_method=str(account.get("method", "GET")),
        account_headers=dict(account.get("headers") or {}),
        token_auth_method=str(token_request.get("auth_method", "client_secret_basic")),
        default_scopes=tuple(str(s) for s in doc.get("default_scopes") or ()),
        scope_separator=str(doc.get("scope_separator", " ")),
        scope_descriptions={str(k): str(v) for k, v in (doc.get("scopes") or {}).items()},
        authorize_params=dict(doc.get("authorize_params") or {}),
        needs_issuer=bool(doc.get("needs_issuer", False)),
        second_token_set=bool(doc.get("second_token_set", True)),
        auth_mode=str(doc["auth_mode"]),
        categories=tuple(doc.get("categories") or ()),
        source_url=doc.get("source_url"),
        setup_url=doc.get("setup_url"),
        parameters={str(k): _parameter(v) for k, v in (doc.get("parameters") or {}).items()},
        pkce=doc.get("pkce"),
        token_accept=token_request.get("accept"),
        token_body=str(token_request.get("body", "form")),
        token_headers=dict(token_request.get("headers") or {}),
        token_extra_params=dict(token_request.get("extra_params") or {}),
        client_id_param=str(token_request.get("client_id_param", "client_id")),
        token_answer=TokenAnswer(
            format=str(answer.get("format", "json")),
            access_token=str(answer.get("access_token", "access_token")),
            refresh_token=str(answer.get("refresh_token", "refresh_token")),
            expires_in=str(answer.get("expires_in", "expires_in")),
            scope=str(answer.get("scope", "scope")),
            error=str(answer.get("error", "error")),
            metadata=tuple(answer.get("metadata") or ()),
        ),
        callback_params=tuple(doc.get("callback_params") or ()),
        callback_hmac=doc.get("callback_hmac"),
        refresh_mode=str(refresh.get("mode", "reuse")),
        refresh_token_expires=bool(refresh.get("refresh_token_expires", False)),
        api_key=None
        if api_key is None
        else ApiKeySpec(
            fields={str(k): _parameter(v) for k, v in api_key["fields"].items()},
            verification=Verification(
                url=str(api_key["verification"]["url"]),
                method=str(api_key["verification"].get("method", "GET")),
                headers=dict(api_key["verification"].get("headers") or {}),
                accept_status=tuple(api_key["verification"].get("accept_status") or (200,)),
                refuse_status=tuple(api_key["verification"].get("refuse_status") or (401, 403)),
                basic_auth=_basic(api_key["verification"].get("basic_auth")),
            ),
        ),
        scope_param=str(doc.get("scope_param", "scope")),
        token_server=None
        if server is None
        else TokenServer(callback_param=str(server["callback_param"]), hosts=tuple(server["hosts"])),
        lookups=tuple(_lookup(raw) for raw in doc.get("lookups") or ()),
        built_in=built_in,
    )


def load_catalog(operator_dir: str | Path | None = None) -> dict[str, CatalogEntry]:
    """The built-in entries, then an operator's directory over them (an operator's file named
    like a built-in one replaces it whole). An operator's file is linted first: a file that would
    fail at a user's connect fails here instead, at start-up."""
    catalog = {key_of(p): entry_from_document(key_of(p), read_document(p)) for p in entry_files(BUILT_IN_DIR)}
    if operator_dir:
        directory = Path(operator_dir)
        if not directory.is_dir():
            raise ConfigurationError(f"{PROVIDERS_DIR_VARIABLE}: {directory} is not a directory")
        from service.connections.catalog_lint import lint_document

        for path in entry_files(directory):
            key = key_of(path)
            document = read_document(path)
            problems = lint_document(key, document)
            if problems:
                raise ConfigurationError(f"provider entry {path.name}: {problems[0]}")
            catalog[key] = entry_from_document(key, document, built_in=False)
    return catalog


def fill_template(
    template: str, parameters: dict[str, Parameter], values: dict[str, str], *, leave_open: bool = False
) -> str:
    """``template`` with each ``{name}`` replaced by its value, every value checked by its
    declared pattern first: a value that does not match never reaches a URL (no host, path or
    query injection through a connection parameter). ``leave_open`` keeps the placeholder of a
    parameter given no value and no default (a connection supplies it: ``fill_url``)."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        declared = parameters.get(name)
        if declared is None:
            raise ConfigurationError(f"parameter '{name}' is not declared")
        value = values.get(name, declared.default)
        if value is None and leave_open:
            return match.group(0)
        if value is None:
            raise ConfigurationError(f"parameter '{name}' is required ({declared.title})")
        if not declared.accepts(value):
            raise ConfigurationError(f"parameter '{name}' does not match its pattern")
        return value

    return PLACEHOLDER.sub(substitute, template)


def _host_pattern(template_host: str, parameters: dict[str, Parameter]) -> re.Pattern[str]:
    """The hosts a templated host may become: its literal text, each placeholder its parameter's
    pattern (anchors dropped, case kept as declared)."""
    pieces, at = [], 0
    for match in PLACEHOLDER.finditer(template_host):
        pieces.append(re.escape(template_host[at : match.start()]))
        pattern = parameters[match.group(1)].pattern.removeprefix("^").removesuffix("$")
        pieces.append(f"(?:{pattern})")
        at = match.end()
    pieces.append(re.escape(template_host[at:]))
    return re.compile("".join(pieces))


def fill_url(template: str, parameters: dict[str, Parameter], values: dict[str, str]) -> str:
    """A templated endpoint filled for one connection (``fill_template``), and then held to the
    host the template declares: the same scheme and port, no credentials, and a host that is the
    template's with each placeholder matching its parameter's pattern. A pattern that let a dot or
    a label through still cannot move the request to another site (no SSRF, no open redirect)."""
    filled = fill_template(template, parameters, values)
    if filled == template:
        return filled
    declared, made = urlsplit(template.replace("{", "").replace("}", "")), urlsplit(filled)
    host_template = _netloc_template(template)
    if (
        made.scheme != declared.scheme
        or made.username is not None
        or made.password is not None
        or made.port != declared.port
        or made.hostname is None
        or not _host_pattern(host_template, parameters).fullmatch(made.hostname)
    ):
        raise ConfigurationError("a connection parameter moves the URL off the provider's host")
    return filled


def _netloc_template(template: str) -> str:
    """The host part of a templated URL, placeholders kept (``{shop}.myshopify.com``)."""
    rest = template.split("://", 1)[1]
    host = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return host.rsplit("@", 1)[-1].split(":", 1)[0].lower()


CATALOG: dict[str, CatalogEntry] = load_catalog(os.environ.get(PROVIDERS_DIR_VARIABLE) or None)


def describe_scope(scope: str, descriptions: dict[str, Any]) -> str:
    """Plain words for a scope in the page's language: the built-in catalog's words through the
    translation catalogue, an operator's words as written, or their own per-language words
    (``{"en": "…", "th": "…"}``: the page's tag, its primary language, English, then the first given);
    unknown scopes are shown as they are, never hidden."""
    text = descriptions.get(scope)
    if isinstance(text, dict):
        tag = current().tag
        text = text.get(tag) or text.get(tag.split("-")[0]) or text.get("en") or next(iter(text.values()), None)
        return str(text) if text else _("Permission “%(scope)s”", scope=scope)
    return _(str(text)) if text else _("Permission “%(scope)s”", scope=scope)


def dig(document: Any, path: str) -> Any:
    """Follow a dotted path (``owner.user.id``) through nested JSON objects, a number indexing a
    list (``0.tenantId`` in Xero's tenant list); None when absent."""
    current = document
    for part in path.split("."):
        if isinstance(current, list) and part.isdigit():
            index = int(part)
            current = current[index] if index < len(current) else None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current
