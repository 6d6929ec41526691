"""Browser side of ``payment``: a summary page, the POST that sends the user to checkout, the page
the provider sends them back to, and Decline.

The user leaves for the provider's page only from a CSRF-protected POST made by the flow's
subject; the return page is also behind the identity check, and it only *asks* the provider — a
query string cannot mark anything paid.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.response import Redirect

from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, status_page
from service.i18n import format_money
from service.payments.deps import PaymentDeps
from service.payments.kind import ZERO_DECIMAL
from service.payments.service import PaymentPage, PaymentReceived, PaymentSummary
from service.signin.gate import BrowserIdentity

Req = Request[Any, Any, Any]


def _amount(amount: int, currency: str) -> str:
    """The amount as the page's locale writes it (``฿1,234.00``, ``1.234,00 €``); Stripe's amounts
    are in minor units, except for its zero-decimal currencies."""
    return format_money(amount, currency, minor_digits=0 if currency.lower() in ZERO_DECIMAL else 2)


def _render(shown: PaymentPage, identity: BrowserIdentity) -> Response[Any]:
    if isinstance(shown, PaymentSummary):
        return _summary(shown, identity)
    if isinstance(shown, PaymentReceived):
        return page(
            "payment_done.html",
            flow_id=FLOW_ID.format(shown.flow.id),
            client=shown.client,
            amount=_amount(shown.amount, shown.currency),
        )
    return status_page(shown.current, 200)


def _summary(shown: PaymentSummary, identity: BrowserIdentity) -> Response[Any]:
    flow_ref = FLOW_ID.format(shown.flow.id)
    response = page(
        "payment.html",
        flow_id=flow_ref,
        client=shown.client,
        amount=_amount(shown.amount, shown.currency),
        description=shown.description,
        csrf_token=identity.csrf_token,
        processing=shown.processing,
        checkout_action=f"/pay/{flow_ref}/checkout",
        decline_action=f"/pay/{flow_ref}/decline",
    )
    # The Pay form redirects to the provider's checkout: allow exactly that origin, not all of https.
    response.headers["Content-Security-Policy"] = (
        f"default-src 'self'; frame-ancestors 'none'; form-action 'self' {shown.checkout_origin}"
    )
    return response


async def payment_page(request: Req, flow: Flow, services: PaymentDeps) -> Response[Any]:
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    return _summary(await services.payments.summary(flow), identity)


@post(
    "/pay/{flow_ref:str}/checkout",
    operation_id="startCheckout",
    tags=["browser"],
    status_code=303,
    summary="Go to the payment provider's checkout (form POST, CSRF-protected)",
)
async def start_checkout(request: Req, flow_ref: str, services: PaymentDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "payment")
    if isinstance(checked, Response):
        return checked
    shown = await services.payments.checkout(checked.flow)
    if isinstance(shown, str):
        return Redirect(shown, status_code=303, headers=PAGE_HEADERS)
    return _render(shown, checked.identity)


@get(
    "/pay/{flow_ref:str}/return",
    operation_id="returnFromCheckout",
    tags=["browser"],
    summary="Where the payment provider sends the user back; settles from a verified lookup",
)
async def return_from_checkout(request: Req, flow_ref: str, services: PaymentDeps) -> Response[Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await services.flows.read(flow_id)
    if flow is None or flow.kind != "payment":
        return status_page(None, 404)
    if flow.status not in {"pending", "completed"}:
        return status_page(flow, 410 if flow.status == "expired" else 200)
    # A completed flow (the webhook won the race) still gets its own "payment received" page,
    # shown only to the subject like every other page of the flow.
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    return _render(await services.payments.returned(flow), identity)


@post(
    "/pay/{flow_ref:str}/decline",
    operation_id="declinePayment",
    tags=["browser"],
    status_code=200,
    summary="Decline the payment (form POST, CSRF-protected)",
)
async def decline_payment(request: Req, flow_ref: str, services: PaymentDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "payment")
    if isinstance(checked, Response):
        return checked
    return status_page(await services.payments.decline(checked.flow), 200)
