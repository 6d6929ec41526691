"""Browser side of ``payment``: a summary page, the POST that sends the user to checkout, the page
the provider sends them back to, and Decline.

The user leaves for the provider's page only from a CSRF-protected POST made by the flow's
subject; the return page is also behind the identity check, and it only *asks* the provider — a
query string cannot mark anything paid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Request, Response, get, post
from litestar.response import Redirect

from service.consent.pages import client_names
from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, status_page
from service.flows.repository import Transition
from service.flows.states import Actor, FlowStatus
from service.payments.kind import format_amount, parse_params
from service.payments.models import Payment
from service.signin.gate import BrowserIdentity

if TYPE_CHECKING:
    from service.services import Services

Req = Request[Any, Any, Any]


async def _summary(
    services: Services, flow: Flow, identity: BrowserIdentity, payment: Payment | None, status: int = 200
) -> Response[Any]:
    params = parse_params(flow.params)
    display_name, _ = await client_names(services, flow)
    flow_ref = FLOW_ID.format(flow.id)
    processing = payment is not None and payment.status == "processing"
    response = page(
        "payment.html",
        status,
        flow_id=flow_ref,
        client=display_name,
        amount=format_amount(params.amount, params.currency),
        description=params.description,
        csrf_token=identity.csrf_token,
        processing=processing,
        checkout_action=f"/pay/{flow_ref}/checkout",
        decline_action=f"/pay/{flow_ref}/decline",
    )
    # The Pay form redirects to the provider's checkout: allow exactly that origin, not all of https.
    origin = services.payments.checkout_origin()
    response.headers["Content-Security-Policy"] = (
        f"default-src 'self'; frame-ancestors 'none'; form-action 'self' {origin}"
    )
    return response


async def payment_page(request: Req, flow: Flow, services: Services) -> Response[Any]:
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    return await _summary(services, flow, identity, await services.payments.payment(flow.id))


@post(
    "/pay/{flow_ref:str}/checkout",
    operation_id="startCheckout",
    tags=["browser"],
    status_code=303,
    summary="Go to the payment provider's checkout (form POST, CSRF-protected)",
)
async def start_checkout(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "payment")
    if isinstance(checked, Response):
        return checked
    found, identity = checked.flow, checked.identity
    url = await services.payments.checkout_url(found)
    if url is None:
        return await _after_return(services, found, identity)
    return Redirect(url, status_code=303, headers=PAGE_HEADERS)


@get(
    "/pay/{flow_ref:str}/return",
    operation_id="returnFromCheckout",
    tags=["browser"],
    summary="Where the payment provider sends the user back; settles from a verified lookup",
)
async def return_from_checkout(request: Req, flow_ref: str, services: Services) -> Response[Any]:
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
    if flow.status == "pending":
        await services.payments.refresh(flow)
    return await _after_return(services, flow, identity)


async def _after_return(services: Services, flow: Flow, identity: BrowserIdentity) -> Response[Any]:
    current = await services.flows.read(flow.id)
    if current is None or current.status != "pending":
        display_name, _ = await client_names(services, flow)
        if current is not None and current.status == "completed" and current.result is not None:
            return page(
                "payment_done.html",
                flow_id=FLOW_ID.format(flow.id),
                client=display_name,
                amount=format_amount(current.result["amount"], current.result["currency"]),
            )
        return status_page(current, 200)
    return await _summary(services, current, identity, await services.payments.payment(flow.id))


@post(
    "/pay/{flow_ref:str}/decline",
    operation_id="declinePayment",
    tags=["browser"],
    status_code=200,
    summary="Decline the payment (form POST, CSRF-protected)",
)
async def decline_payment(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "payment")
    if isinstance(checked, Response):
        return checked
    found = checked.flow
    moved = await services.flows.finish(found.id, Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined"))
    # Declined here first, then the open checkout is closed at the provider: money that still
    # arrives in between is recorded as ``paid_late`` for a refund, never as a completion.
    await services.payments.cancel_checkout(found.id)
    current = moved or await services.flows.read(found.id)
    return status_page(current, 200)
