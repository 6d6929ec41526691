"""The ``api_key`` kind: a page where the user types a secret for a provider, stored encrypted."""

from __future__ import annotations

from service.apikeys.kind import ApiKeyKind
from service.apikeys.pages import api_key_page, submit_api_key
from service.flows.plugins import KindPlugin
from service.settings import Settings


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="api_key",
        handler=ApiKeyKind(),
        page=api_key_page,
        routes=(submit_api_key,),
        stores=("connections",),
    )
