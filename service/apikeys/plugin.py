"""The ``api_key`` kind: a page where the user types a secret for a provider, stored encrypted."""

from __future__ import annotations

from dataclasses import dataclass

from service.apikeys.deps import ApiKeyServices
from service.apikeys.kind import ApiKeyKind
from service.apikeys.pages import api_key_page, submit_api_key
from service.apikeys.probes import probes
from service.apikeys.service import ApiKeyService
from service.flows.plugins import KindPlugin
from service.kind_context import KindContext
from service.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ApiKeyKindServices(KindContext):
    """What the API-key form and its POST receive as ``services``, the grant page's parts included."""

    apikeys: ApiKeyService


def services(context: KindContext) -> ApiKeyServices:
    return ApiKeyKindServices(
        **context.parts(),
        apikeys=ApiKeyService(context.flows, context.vault, http=context.http, announce=context.connections.announce),
    )


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="api_key",
        handler=ApiKeyKind(),
        page=api_key_page,
        routes=(submit_api_key,),
        stores=("connections",),
        services=services,
        probes=probes,
    )
