"""The ``oauth_connect`` kind: sign in, confirm, the provider's authorization, the callback."""

from __future__ import annotations

from dataclasses import dataclass

from service.connect.authorize import ConnectService
from service.connect.deps import ConnectPageServices
from service.connect.kind import OAuthConnectKind
from service.connect.pages import ROUTES, connect_page
from service.flows.plugins import KindPlugin
from service.kind_context import KindContext
from service.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ConnectKindServices(KindContext):
    """What the connect pages and the callback receive as ``services``, the grant page's parts included."""

    connect: ConnectService


def services(context: KindContext) -> ConnectPageServices:
    return ConnectKindServices(
        **context.parts(),
        connect=ConnectService(
            connections=context.connections,
            flows=context.flows,
            read_sessions=context.read_sessions,
            http=context.http,
            public_url=context.settings.public_url,
            vault=context.vault,
        ),
    )


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="oauth_connect",
        handler=OAuthConnectKind(),
        page=connect_page,
        routes=tuple(ROUTES),
        stores=("connections", "oauth_states"),
        services=services,
    )
