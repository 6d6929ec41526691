"""Registers the ``consent`` kind with the app: its creation handler, page, routes and signer."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State

from service.consent.kind import ConsentKind
from service.consent.pages import consent_page, decide, jwks
from service.consent.receipts import ReceiptSigner
from service.consent.service import ConsentService
from service.flows.service import FlowService
from service.settings import Settings


def install(state: State, flows: FlowService, settings: Settings) -> list[Any]:
    """Fails at startup (ConfigurationError) on an unusable signing key, not at the first approval."""
    signer = ReceiptSigner.from_pem(settings.signing_key) if settings.signing_key else None
    state.consent = ConsentService(flows, signer, settings.public_url)
    flows.handlers["consent"] = ConsentKind(signing_enabled=signer is not None)
    state.kind_pages["consent"] = consent_page
    return [decide, jwks]
