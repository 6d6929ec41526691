"""Console pages for payments (``/console/payments``): the list, one payment with the provider's
events, and *Reconcile*.

*Reconcile* runs ``service.admin.payments.reconcile_payment``, what ``POST
/admin/v1/payments/{flow_id}/reconcile`` runs (ask the provider about the checkout now and apply
its answer in one transition), names that operation for its audit row, and needs operator. Its
answer is the payment's page with what the provider said: asking again is harmless (a settled
payment answers ``already_settled``), so the page is the POST's own answer, not a redirect.
Views leave out the checkout URL (whoever holds it can pay), as the API's do.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from litestar import Request, get, post
from litestar.response import Template

from service.admin import payments
from service.admin.deps import OPERATOR, in_unit
from service.console.client_forms import FormError
from service.console.client_pages import attempt
from service.console.deps import ConsoleDeps
from service.console.render import render
from service.i18n import N_, format_money
from service.payments.kind import ZERO_DECIMAL
from service.payments.models import PAYMENT_STATUSES

NAV = (60, "/console/payments", N_("Payments"))
AREA = "payments"
PAGE = 50
AnyRequest = Request[Any, Any, Any]


def _money(amount: int, currency: str) -> str:
    """As the payment page writes it: minor units, except for zero-decimal currencies."""
    return format_money(amount, currency, minor_digits=0 if currency.lower() in ZERO_DECIMAL else 2)


def _page(request: AnyRequest, template: str, *, status: int = 200, **context: Any) -> Template:
    return render(request, template, status=status, area=AREA, money=_money, **context)


@get("/payments", name="console-payments")
async def payments_page(
    request: AnyRequest,
    services: ConsoleDeps,
    status: str | None = None,
    provider: str | None = None,
    cursor: str | None = None,
) -> Template:
    query = {
        name: value.strip() for name, value in (("status", status), ("provider", provider)) if value and value.strip()
    }
    found = await attempt(
        lambda: in_unit(
            services,
            payments.list_payments,
            status=query.get("status"),
            provider=query.get("provider"),
            cursor=cursor,
            limit=PAGE,
        )
    )
    filters = {"status": query.get("status"), "provider": query.get("provider")}
    if isinstance(found, FormError):
        return _page(
            request,
            "console/payments.html",
            status=found.status,
            payments=[],
            filters=filters,
            statuses=PAYMENT_STATUSES,
            error=found,
        )
    return _page(
        request,
        "console/payments.html",
        payments=found.items,
        next_cursor=found.next_cursor,
        next_query=urlencode({**query, "cursor": found.next_cursor or ""}),
        filters=filters,
        statuses=PAYMENT_STATUSES,
        error=None,
    )


async def _payment(
    request: AnyRequest, services: ConsoleDeps, flow_id: str, *, reconciled: payments.Reconciled | None = None
) -> Template:
    detail = await in_unit(services, payments.show_payment, flow_id)
    return _page(request, "console/payments_detail.html", detail=detail, reconciled=reconciled, error=None)


@get("/payments/{flow_id:str}", name="console-payment")
async def payment_page(request: AnyRequest, services: ConsoleDeps, flow_id: str) -> Template:
    return await _payment(request, services, flow_id)


@post(
    "/payments/{flow_id:str}/reconcile",
    name="console-payment-reconcile",
    opt={**OPERATOR, "audit": "adminReconcilePayment"},
    status_code=200,
)
async def reconcile(request: AnyRequest, services: ConsoleDeps, flow_id: str) -> Template:
    """A refusal (no checkout yet: 409; the provider down: 503) is the console's error page, with
    the status the API answers, so the audit row says the same."""
    reconciled = await payments.reconcile_payment(services, flow_id)
    return await _payment(request, services, flow_id, reconciled=reconciled)


ROUTES = [payments_page, payment_page, reconcile]
