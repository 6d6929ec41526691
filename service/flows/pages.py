"""``GET /f/{flow_id}``: the URL every elicitation points at.

It resolves the flow and hands pending flows to the page of their kind (the kind's plugin,
``service.flows.plugins``). Unknown, expired and finished flows get a clear page here, never a
stack trace. The flow id in the URL is opaque: it grants nothing by itself, because every kind's
page first proves the browser belongs to the flow's subject.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.response import Template

from service.db.base import FLOW_ID
from service.domains import display_url_host
from service.flows.deps import FlowPageDeps
from service.flows.models import Flow
from service.flows.service import FlowService
from service.i18n import N_, _

_FINISHED = {
    "completed": (
        N_("All done"),
        N_("This request is complete. You can close this tab and return to your assistant."),
    ),
    "declined": (N_("Declined"), N_("This request was declined. Nothing was shared.")),
    "cancelled": (N_("Cancelled"), N_("This request was cancelled. Nothing was shared.")),
    "expired": (N_("This link has expired"), N_("Ask your assistant to try again; it will give you a new link.")),
    "failed": (
        N_("Something went wrong"),
        N_("This request could not be completed. Ask your assistant to try again."),
    ),
}

PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self' https:",
}


def page(template: str, status: int = 200, **context: Any) -> Response[Any]:
    """Render an elicitd page with the headers every browser page carries (``domain``, the origin
    every page names, is a template global set by ``create_app``)."""
    return Template(template_name=template, context=context, status_code=status, headers=PAGE_HEADERS)


def status_page(flow: Flow | None, status: int = 200) -> Response[Any]:
    if flow is None:
        return page(
            "flow_status.html",
            404,
            heading=_("Link not found"),
            text=_("This link is not valid. Check that you copied it completely, or ask your assistant for a new one."),
            flow_id="-",
        )
    heading, text = _FINISHED.get(flow.status, (N_("Unavailable"), N_("This request is not available.")))
    return page("flow_status.html", status, heading=_(heading), text=_(text), flow_id=FLOW_ID.format(flow.id))


async def pending_flow(flows: FlowService, flow_ref: str, kind: str) -> Flow | Response[Any]:
    """The pending flow of this kind, or the page to show instead (unknown, finished, expired)."""
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await flows.read(flow_id)
    if flow is None or flow.kind != kind:
        return status_page(None, 404)
    if flow.status != "pending":
        return status_page(flow, 410 if flow.status == "expired" else 200)
    return flow


@get(
    "/f/{flow_ref:str}",
    operation_id="openFlowPage",
    tags=["browser"],
    include_in_schema=True,
    summary="The elicitation URL: the browser side of a flow",
)
async def open_flow(request: Request[Any, Any, Any], flow_ref: str, services: FlowPageDeps) -> Response[Any]:
    flows = services.flows
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await flows.read(flow_id)
    if flow is None:
        return status_page(None, 404)
    if flow.status != "pending":
        return status_page(flow, 410 if flow.status == "expired" else 200)
    if flow.kind == "external" and flow.external_url:
        return page(
            "flow_status.html",
            heading=_("Continue on the service's own page"),
            text=_("This step happens on a page run by the service that asked."),
            link=flow.external_url,
            link_host=display_url_host(flow.external_url),
            flow_id=FLOW_ID.format(flow.id),
        )
    kind = services.kinds.get(flow.kind)
    if kind is None or kind.plugin.page is None:
        return page(
            "flow_status.html",
            501,
            heading=_("Not available yet"),
            text=_("This kind of request (%(kind)s) cannot be completed on this elicitd yet.", kind=flow.kind),
            flow_id=FLOW_ID.format(flow.id),
        )
    return await kind.plugin.page(request, flow, kind.services)
