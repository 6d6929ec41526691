"""An API-key provider's definition from its catalog entry (``auth_mode: api_key``).

The entry says the form's fields (one of them secret: the key) and the request that checks a key;
the definition (``ApiKeyConfig``) is what the form and the live check already read. Only what the
definition can express is converted — the key in an ``Authorization: Bearer`` header, in a header
of its own (with a constant prefix), or as basic auth with a field or a constant for the other
half, plus constant headers — and anything else is refused by name rather than half-converted.
"""

from __future__ import annotations

import re
from typing import Any

from service.connections.catalog import CatalogEntry
from service.errors import ConfigurationError

_FIELD = re.compile(r"^\{([a-z][a-z0-9_]*)\}$")


def _refused(entry: CatalogEntry, why: str) -> ConfigurationError:
    return ConfigurationError(f"catalog entry '{entry.key}': {why}")


def _carrier(entry: CatalogEntry, key_name: str) -> dict[str, Any]:
    """How the check sends the key: bearer, a header of its own, or basic auth; plus constants."""
    assert entry.api_key is not None
    spec = entry.api_key
    verification = spec.verification
    marker = "{" + key_name + "}"
    check: dict[str, Any] = {}
    constant: dict[str, str] = {}
    carriers = []
    for header, value in verification.headers.items():
        if marker not in value:
            if "{" in value:
                raise _refused(entry, f"header {header} is templated from a field")
            constant[header] = value
            continue
        carriers.append(header)
        if header.lower() == "authorization" and value == f"Bearer {marker}":
            check["auth"] = "bearer"
        elif value.endswith(marker) and "{" not in value.removesuffix(marker):
            check |= {"auth": "header", "header": header, "prefix": value.removesuffix(marker)}
        else:
            raise _refused(entry, f"header {header} carries the key in a way the check cannot send")
    if verification.basic_auth is not None:
        carriers.append("basic")
        user, password = verification.basic_auth
        check["auth"] = "basic"
        if user == marker and "{" not in password:
            check["basic_password"] = password
        elif password == marker and (found := _FIELD.match(user)) and found.group(1) in spec.fields:
            check["basic_username_field"] = found.group(1)
        else:
            raise _refused(entry, "basic auth pairs the key with something the check cannot send")
    if len(carriers) != 1:
        raise _refused(entry, "the key must travel in exactly one header")
    if constant:
        check["headers"] = constant
    return check


def definition_from_entry(entry: CatalogEntry) -> dict[str, Any]:
    """The ``ApiKeyConfig`` document for ``entry`` (validated again by ``parse_config`` on save)."""
    spec = entry.api_key
    if entry.auth_mode != "api_key" or spec is None:
        raise _refused(entry, "is not an API key service")
    secrets = [name for name, field in spec.fields.items() if field.secret]
    if len(secrets) != 1:
        raise _refused(entry, "needs exactly one secret field (the key)")
    key_name = secrets[0]
    key = spec.fields[key_name]
    check = {"url": spec.verification.url, "method": spec.verification.method, **_carrier(entry, key_name)}
    fields = [
        {
            "name": name,
            "label": field.title,
            "pattern": field.pattern,
            **({"example": field.example} if field.example else {}),
        }
        for name, field in spec.fields.items()
        if name != key_name
    ]
    return {
        "key_label": key.title,
        **({"help_url": entry.setup_url} if entry.setup_url else {}),
        "pattern": key.pattern,
        "fields": fields,
        "check": check,
    }
