"""The ``oauth_connect`` kind: sign in, confirm, the provider's authorization, the callback."""

from __future__ import annotations

from service.connections.kind import OAuthConnectKind
from service.connections.pages import ROUTES, connect_page
from service.flows.plugins import KindPlugin
from service.settings import Settings


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="oauth_connect",
        handler=OAuthConnectKind(),
        page=connect_page,
        routes=tuple(ROUTES),
        stores=("connections", "oauth_states"),
    )
