"""The registry of flow kinds: name → the module whose ``plugin(settings)`` builds its ``KindPlugin``.

A leaf: names are read without importing the kinds (the schema and the models need them before any
kind module can load), so this module imports nothing of elicitd's. The composition root
(``service.services.load_plugins``) imports each module and checks that the plugin it builds
carries the name it is registered under. Adding a kind is its package and one line here.
"""

from __future__ import annotations

REGISTRY: dict[str, str] = {
    "oauth_connect": "service.connections.plugin",
    "api_key": "service.apikeys.plugin",
    "consent": "service.consent.plugin",
    "payment": "service.payments.plugin",
    "external": "service.flows.external",
}
KIND_NAMES: tuple[str, ...] = tuple(REGISTRY)
