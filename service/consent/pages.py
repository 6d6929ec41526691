"""Browser side of ``consent``: the page that shows who asks what, and the Approve/Decline POST.

Both the page and the POST run the identity check first: the flow id in the URL proves nothing,
only a login at the subject's issuer as the subject does. The POST also carries the digest of the
text the page showed; if the text the receipt would attest differs (it cannot change for a flow,
but a deploy could change how it is shown), the approval is refused rather than signed.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from service.consent.deps import ConsentDeps
from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import page, status_page
from service.i18n import _

Req = Request[Any, Any, Any]


async def consent_page(request: Req, flow: Flow, services: ConsentDeps) -> Response[Any]:
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    shown = await services.consent.page(flow)
    flow_ref = FLOW_ID.format(flow.id)
    return page(
        "consent.html",
        flow_id=flow_ref,
        client=shown.client,
        view=shown.view,
        csrf_token=identity.csrf_token,
        action=f"/consent/{flow_ref}/decide",
    )


@get(
    "/.well-known/jwks.json",
    operation_id="getJwks",
    tags=["keys"],
    media_type="application/jwk-set+json",
    cache=False,
    summary="Public keys that verify consent receipts",
    description="A JWK Set of the ES256 keys elicitd signs consent receipts with (RFC 7517). "
    "The receipt header's `kid` names the key.",
)
async def jwks(services: ConsentDeps) -> Response[Any]:
    signer = services.consent.signer
    body = signer.jwks() if signer is not None else {"keys": []}
    return Response(body, media_type="application/jwk-set+json", headers={"Cache-Control": "public, max-age=300"})


@post(
    "/consent/{flow_ref:str}/decide",
    operation_id="decideConsent",
    tags=["browser"],
    status_code=200,
    summary="Approve or decline a consent (form POST from the consent page, CSRF-protected)",
)
async def decide(request: Req, flow_ref: str, services: ConsentDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "consent")
    if isinstance(checked, Response):
        return checked
    form = checked.form
    decided = await services.consent.decide(
        checked.flow, decision=form.get("decision"), shown_digest=form.get("text_sha256")
    )
    if decided.moved is None:
        return status_page(decided.current, 200 if decided.current is not None else 404)
    approved = decided.moved.status == "completed"
    return page(
        "consent_done.html",
        flow_id=flow_ref,
        client=decided.client,
        approved=approved,
        heading=_("Approved") if approved else _("Declined"),
    )
