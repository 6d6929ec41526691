"""The ``consent`` kind: a page that shows who asks what; approval yields a signed receipt."""

from __future__ import annotations

from dataclasses import dataclass

from service.consent.deps import ConsentServices
from service.consent.kind import ConsentKind
from service.consent.pages import consent_page, decide, jwks
from service.consent.receipts import ReceiptSigner
from service.consent.service import ConsentService
from service.flows.plugins import KindPlugin
from service.kind_context import KindContext
from service.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ConsentKindServices(KindContext):
    """What consent's page, decision and key set receive as ``services``."""

    consent: ConsentService


def services(context: KindContext) -> ConsentServices:
    settings = context.settings
    signer = ReceiptSigner.from_pem(settings.signing_key) if settings.signing_key else None
    return ConsentKindServices(
        **context.parts(), consent=ConsentService(context.flows, signer, settings.public_url, clock=context.clock)
    )


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="consent",
        handler=ConsentKind(signing_enabled=settings.signing_key is not None),
        page=consent_page,
        routes=(decide, jwks),
        stores=("consent_receipts",),
        services=services,
    )
