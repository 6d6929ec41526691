"""The console's Flows pages (``/console/flows``): search, one flow's whole history, Cancel, Expire.

The search is the admin API's listing (``service.admin.flows.FlowFilters`` and ``list_flows``: the
same filters, the same keyset pages), a flow's page its ``show_flow`` (every event with the side
that caused it, the webhook deliveries, the result's shape — never the result), and Cancel and
Expire call ``finish_flow`` as ``adminCancelFlow`` and ``adminExpireFlow`` do, naming the operator
in the flow's event; each writes those operations' audit row (``opt["audit"]``). Reading needs
viewer, acting operator, as in the API.

The time window is resolved once, on the database clock, when a search starts; the next page's
link carries that instant (``since``), so paging never shifts the window under the reader.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.params import Parameter
from litestar.response import Redirect

from service.admin import clients, flows
from service.admin.deps import OPERATOR
from service.console.auth import Operator
from service.console.deps import ConsoleDeps
from service.console.flow_words import KINDS, STATES, WINDOWS, refusal, template_words
from service.console.render import render
from service.errors import ElicitdError
from service.flows.states import FlowStatus
from service.i18n import N_, _
from service.kinds import KIND_NAMES

NAV = (10, "/console/flows", N_("Flows"))
PAGE = 50

DEFAULT_WINDOW = "7d"

_NOTICES = {
    "cancelled": N_("The flow is cancelled."),
    "expired": N_("The flow is expired."),
}
_REFUSED = {
    "flow_not_pending": N_("The flow has already finished; it cannot change again."),
    "flow_not_found": N_("No flow with this id."),
    "server_client_not_found": N_("No server client with this name or id."),
    "invalid_request": N_("The search was not understood."),
}


def _page(request: Request[Any, Any, Any], template: str, *, status: int = 200, **context: Any) -> Response[Any]:
    return render(
        request,
        template,
        status=status,
        area="flows",
        kinds=[(k, KINDS.get(k, k)) for k in KIND_NAMES],
        states=list(STATES.items()),
        windows=[(value, label) for value, (_span, label) in WINDOWS.items()],
        **template_words(),
        **context,
    )


@get("/flows", name="console-flows")
async def search(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    operator: Operator,
    iss: str | None = None,
    sub: str | None = None,
    server_client: str | None = None,
    kind: str | None = None,
    flow_state: Annotated[str | None, Parameter(query="state")] = None,
    window: str | None = None,
    since: datetime | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Parameter(ge=1, le=PAGE)] = PAGE,
) -> Response[Any]:
    asked = {
        "iss": (iss or "").strip(),
        "sub": (sub or "").strip(),
        "server_client": (server_client or "").strip(),
        "kind": kind or "",
        "state": flow_state or "",
        "window": window if window in WINDOWS else DEFAULT_WINDOW,
    }
    try:
        async with services.sessions() as session:  # a read: nothing to commit
            client = await clients.public_id_of(session, asked["server_client"]) if asked["server_client"] else None
            span = WINDOWS[asked["window"]][0]
            if since is None and span is not None:
                since = await flows.db_now(session) - span
            filters = flows.FlowFilters(
                status=asked["state"] or None,
                kind=asked["kind"] or None,
                server_client=client,
                subject_iss=asked["iss"] or None,
                subject_sub=asked["sub"] or None,
                created_after=since,
            )
            found = await flows.list_flows(session, filters, cursor=cursor, limit=limit)
    except ElicitdError as exc:
        return _page(
            request, "console/flows.html", status=exc.status, asked=asked, items=[], error=refusal(_REFUSED, exc)
        )
    # The next page keeps the window's instant (``since``), or "any time" when it has none.
    carried = {k: v for k, v in asked.items() if v and (k != "window" or since is None)}
    if limit != PAGE:
        carried["limit"] = str(limit)
    if since is not None:
        carried["since"] = since.isoformat()
    return _page(
        request,
        "console/flows.html",
        asked=asked,
        items=found.items,
        next_cursor=found.next_cursor,
        carried=carried,
        since=since,
        error=None,
    )


_WHO_KEYS = ("operator", "admin_token_id", "via")


def event_who(event: Any, flow: Any) -> str:
    """Who caused an event, as far as the flow knows: the operator, the admin token or the CLI for
    the admin side; the person for the browser; the server client for the API."""
    detail = event.detail or {}
    if isinstance(detail.get("operator"), dict):
        who = detail["operator"]
        return _("%(sub)s at %(iss)s", sub=who.get("sub", ""), iss=who.get("iss", ""))
    if detail.get("admin_token_id"):
        return _("Admin token %(id)s", id=detail["admin_token_id"])
    if detail.get("via") == "cli":
        return _("The command line")
    if event.actor == "browser":
        return _("%(sub)s at %(iss)s", sub=flow.subject.sub, iss=flow.subject.iss)
    if event.actor in {"api", "mcp_client"}:
        return str(flow.server_client)
    return ""


def event_rest(event: Any) -> list[tuple[str, str]]:
    """The event's other details (codes and ids, as the admin API shows them)."""
    return [
        (str(k), v if isinstance(v, str) else json.dumps(v, sort_keys=True))
        for k, v in sorted((event.detail or {}).items())
        if k not in _WHO_KEYS
    ]


async def _flow_page(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    flow_id: str,
    *,
    status: int = 200,
    notice: str | None = None,
    error: dict[str, Any] | None = None,
) -> Response[Any]:
    async with services.sessions() as session:  # a read: nothing to commit
        detail = await flows.show_flow(services.flows, session, flow_id)
    shape = None if detail.result_shape is None else json.dumps(detail.result_shape, indent=2, sort_keys=True)
    return _page(
        request,
        "console/flows_detail.html",
        status=status,
        detail=detail,
        flow=detail.flow,
        shape=shape,
        who=lambda event: event_who(event, detail.flow),
        rest=event_rest,
        notice=notice,
        error=error,
    )


@get("/flows/{flow_id:str}", name="console-flow")
async def show(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, flow_id: str, done: str | None = None
) -> Response[Any]:
    notice = _(_NOTICES[done]) if done in _NOTICES else None
    return await _flow_page(request, services, flow_id, notice=notice)


async def _finish(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, flow_id: str, to: FlowStatus
) -> Response[Any]:
    try:
        await flows.finish_flow(services.flows, flow_id, to, admin_token=None, operator=operator.who)
    except ElicitdError as exc:
        if exc.problem_code == "flow_not_found":
            raise
        return await _flow_page(request, services, flow_id, status=exc.status, error=refusal(_REFUSED, exc))
    return Redirect(f"/console/flows/{flow_id}?done={to.value}", status_code=303)


@post("/flows/{flow_id:str}/cancel", name="console-flow-cancel", opt={**OPERATOR, "audit": "adminCancelFlow"})
async def cancel(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, flow_id: str
) -> Response[Any]:
    return await _finish(request, services, operator, flow_id, FlowStatus.CANCELLED)


@post("/flows/{flow_id:str}/expire", name="console-flow-expire", opt={**OPERATOR, "audit": "adminExpireFlow"})
async def expire(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, flow_id: str
) -> Response[Any]:
    return await _finish(request, services, operator, flow_id, FlowStatus.EXPIRED)


ROUTES = [search, show, cancel, expire]
