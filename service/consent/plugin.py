"""The ``consent`` kind: a page that shows who asks what; approval yields a signed receipt."""

from __future__ import annotations

from service.consent.kind import ConsentKind
from service.consent.pages import consent_page, decide, jwks
from service.flows.plugins import KindPlugin
from service.settings import Settings


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="consent",
        handler=ConsentKind(signing_enabled=settings.signing_key is not None),
        page=consent_page,
        routes=(decide, jwks),
        stores=("consent_receipts",),
    )
