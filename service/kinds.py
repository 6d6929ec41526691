"""The registry of flow kinds: name → the module whose ``plugin(settings)`` builds its ``KindPlugin``.

Names are read without importing the kinds (the schema and the models need them before any kind
module can load); ``load_plugins`` imports each module and checks that the plugin it builds carries
the name it is registered under.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from service.settings import Settings

if TYPE_CHECKING:
    from service.flows.plugins import KindPlugin

REGISTRY: dict[str, str] = {
    "oauth_connect": "service.connections.plugin",
    "api_key": "service.apikeys.plugin",
    "consent": "service.consent.plugin",
    "payment": "service.payments.plugin",
    "external": "service.flows.external",
}
KIND_NAMES: tuple[str, ...] = tuple(REGISTRY)


def load_plugins(settings: Settings) -> dict[str, KindPlugin]:
    plugins: dict[str, KindPlugin] = {}
    for name, module_name in REGISTRY.items():
        plugin: KindPlugin = importlib.import_module(module_name).plugin(settings)
        if plugin.name != name:
            raise RuntimeError(f"{module_name} builds the kind {plugin.name!r}, registered as {name!r}")
        plugins[name] = plugin
    return plugins
