"""The provider, issuer and trust-group forms → the admin API's own request bodies.

A form becomes the dict the matching admin route takes as JSON, and ``client_forms.body`` turns it
into that route's struct (``CreateProvider``, ``UpdateIssuer`` …), so a value the API refuses is
refused here by the same rule. The console only translates HTML shapes: an empty text field is a
value not given, a list is written one item a line, a box is a boolean.

An update sends only what the operator changed (the API's PATCH semantics: a field present
changes, ``null`` clears it), compared with the stored values the page shows. A secret field is never shown
(no ``value``), so an empty one means "keep the stored secret"; its box "remove" sends ``null``.
A refused form is shown again with what was typed, but never with a secret typed into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.admin.directory import IssuerView, ProviderView
from service.connections.providers import ADDRESS_FIELDS
from service.console.client_forms import Form

# The provider fields a form carries as one text each (URLs, names); empty = not given.
PROVIDER_TEXTS = ("display_name", "client_id", *ADDRESS_FIELDS)
PROVIDER_CREATE_ONLY = ("name", "catalog", "account_id_field", "account_login_field")
# The update body may clear these (``null``); the others are required once set.
PROVIDER_CLEARABLE = frozenset(ADDRESS_FIELDS)
ISSUER_TEXTS = (
    "display_name",
    "client_id",
    "authorization_endpoint",
    "token_endpoint",
    "jwks_uri",
    "introspection_endpoint",
    "introspection_client_id",
)
ISSUER_CLEARABLE = frozenset(
    {"authorization_endpoint", "token_endpoint", "jwks_uri", "introspection_endpoint", "introspection_client_id"}
)
AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


def _given(form: Form, names: Iterable[str]) -> dict[str, Any]:
    return {name: value for name in names if (value := form.get(name))}


def _secrets(form: Form, names: Iterable[str], *, update: bool) -> dict[str, Any]:
    """A typed secret is given; on an update, an empty one is kept and a ticked box clears it."""
    found: dict[str, Any] = {}
    for name in names:
        typed = form.get(name)
        if typed:
            found[name] = typed
        elif update and form.checked("clear_" + name):
            found[name] = None
    return found


def _changed(given: Mapping[str, Any], current: Mapping[str, Any], clearable: frozenset[str]) -> dict[str, Any]:
    """The fields whose value differs from what the page showed; an emptied clearable one is ``null``,
    an emptied required one is sent empty (so the API's own length rule refuses it)."""
    changed: dict[str, Any] = {}
    for name, shown in current.items():
        value = given.get(name)
        if value in (None, "", []):
            value = None if name in clearable else ([] if isinstance(shown, list) else "")
            if shown in (None, "", []):
                continue
        if value != shown:
            changed[name] = value
    return changed


# ---- providers ---------------------------------------------------------------------------------------
def provider_shown(form: Form | None = None) -> dict[str, Any]:
    """What the add form shows: empty, or what was typed (never the secret)."""
    if form is None:
        return {"enabled": True, "default_scopes": []}
    shown: dict[str, Any] = _given(form, (*PROVIDER_TEXTS, *PROVIDER_CREATE_ONLY, "token_auth_method"))
    shown["default_scopes"] = form.lines("default_scopes")
    shown["enabled"] = form.checked("enabled")
    return shown


def provider_create(form: Form) -> dict[str, Any]:
    body = _given(form, (*PROVIDER_TEXTS, *PROVIDER_CREATE_ONLY))
    body["name"] = form.get("name")
    body["client_id"] = form.get("client_id")
    body.update(_secrets(form, ["client_secret"], update=False))
    if method := form.get("token_auth_method"):
        body["token_auth_method"] = method
    if scopes := form.lines("default_scopes"):
        body["default_scopes"] = scopes
    body["enabled"] = form.checked("enabled")
    return body


def provider_current(view: ProviderView) -> dict[str, Any]:
    """What the change form shows for ``view``: the fields it can change, as they are now."""
    current: dict[str, Any] = {name: getattr(view, name) for name in PROVIDER_TEXTS}
    current["token_auth_method"] = view.token_auth_method
    current["default_scopes"] = list(view.default_scopes)
    return current


def provider_update(form: Form, view: ProviderView) -> dict[str, Any]:
    given: dict[str, Any] = _given(form, PROVIDER_TEXTS)
    given["default_scopes"] = form.lines("default_scopes")
    current = provider_current(view)
    method = form.get("token_auth_method")
    given["token_auth_method"] = method or current["token_auth_method"]  # empty: as it is
    return {**_changed(given, current, PROVIDER_CLEARABLE), **_secrets(form, ["client_secret"], update=True)}


def provider_typed(form: Form, view: ProviderView) -> dict[str, Any]:
    """The change form shown again after a refusal: what was typed (never a secret)."""
    typed = {**provider_current(view), **{name: form.get(name) for name in PROVIDER_TEXTS}}
    typed["default_scopes"] = form.lines("default_scopes")
    typed["token_auth_method"] = form.get("token_auth_method")
    return typed


# ---- issuers -----------------------------------------------------------------------------------------
ISSUER_SECRETS = ("client_secret", "introspection_client_secret")


def issuer_shown(form: Form | None = None) -> dict[str, Any]:
    if form is None:
        return {"enabled": True, "scopes": []}
    shown: dict[str, Any] = _given(form, ("issuer", *ISSUER_TEXTS))
    shown["scopes"] = form.lines("scopes")
    shown["enabled"] = form.checked("enabled")
    return shown


def issuer_create(form: Form) -> dict[str, Any]:
    body = _given(form, ISSUER_TEXTS)
    body["issuer"] = form.get("issuer")
    body["client_id"] = form.get("client_id")
    body.update(_secrets(form, ISSUER_SECRETS, update=False))
    if scopes := form.lines("scopes"):
        body["scopes"] = scopes
    body["enabled"] = form.checked("enabled")
    return body


def issuer_current(view: IssuerView) -> dict[str, Any]:
    current: dict[str, Any] = {name: getattr(view, name) for name in ISSUER_TEXTS}
    current["scopes"] = list(view.scopes)
    return current


def issuer_update(form: Form, view: IssuerView) -> dict[str, Any]:
    given: dict[str, Any] = _given(form, ISSUER_TEXTS)
    given["scopes"] = form.lines("scopes")
    changed = _changed(given, issuer_current(view), ISSUER_CLEARABLE)
    return {"issuer": view.issuer, **changed, **_secrets(form, ISSUER_SECRETS, update=True)}


def issuer_typed(form: Form, view: IssuerView) -> dict[str, Any]:
    typed = {**issuer_current(view), **{name: form.get(name) for name in ISSUER_TEXTS}}
    typed["scopes"] = form.lines("scopes")
    return typed


# ---- trust groups ------------------------------------------------------------------------------------
def group_shown(form: Form | None = None) -> dict[str, Any]:
    if form is None:
        return {"members": [], "allow_unproven": False}
    return {
        "name": form.get("name"),
        "display_name": form.get("display_name"),
        "members": form.lines("members"),
        "allow_unproven": form.checked("allow_unproven"),
    }


def group_create(form: Form) -> dict[str, Any]:
    return group_shown(form)


def group_update(form: Form) -> dict[str, Any]:
    """The complete member list and both other fields: the page always shows all three."""
    shown = group_shown(form)
    del shown["name"]
    return shown
