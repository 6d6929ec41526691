"""The registry of flow kinds: name → the module whose ``plugin(settings)`` builds its ``KindPlugin``.

A leaf: names are read without importing the kinds (the schema and the models need them before any
kind module can load), so this module imports nothing of elicitd's but its error tree. The
composition root (``service.services.load_plugins``) imports each module and checks that the
plugin it builds carries the name it is registered under. Adding a kind is its package and one
line in ``BUILT_IN``; a kind kept outside this tree is named in ``ELICITD_EXTRA_KINDS`` instead.

The registry is read once, when this module is first imported, because the API schema's allowed
kinds and the flow model's check constraint are built from it at import: an extra kind is named
in the environment of the process before it starts, never added to a running one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from service.errors import ConfigurationError

BUILT_IN: dict[str, str] = {
    "oauth_connect": "service.connect.plugin",
    "api_key": "service.apikeys.plugin",
    "consent": "service.consent.plugin",
    "payment": "service.payments.plugin",
    "external": "service.flows.external",
}

EXTRA_KINDS_VARIABLE = "ELICITD_EXTRA_KINDS"
# A kind's name is an API value and part of the flows table's check constraint: plain words only.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def extra_kinds(value: str) -> dict[str, str]:
    """``name=module`` pairs, comma-separated (``ELICITD_EXTRA_KINDS``): kinds beside the built-in ones."""
    extra: dict[str, str] = {}
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        name, _, module = (piece.strip() for piece in entry.partition("="))
        if not _NAME.fullmatch(name) or not _MODULE.fullmatch(module):
            raise ConfigurationError(
                f"{EXTRA_KINDS_VARIABLE}: {entry!r} is not name=module (a lower-case name, a Python module path)"
            )
        if name in BUILT_IN or name in extra:
            raise ConfigurationError(f"{EXTRA_KINDS_VARIABLE}: the kind {name!r} is already registered")
        extra[name] = module
    return extra


def registry(env: Mapping[str, str]) -> dict[str, str]:
    """The built-in kinds and the extra ones ``env`` names."""
    return {**BUILT_IN, **extra_kinds(env.get(EXTRA_KINDS_VARIABLE, ""))}


REGISTRY: dict[str, str] = registry(os.environ)
KIND_NAMES: tuple[str, ...] = tuple(REGISTRY)
