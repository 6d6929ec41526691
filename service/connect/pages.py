"""Browser side of ``oauth_connect``: the connect page, Continue / Decline, the provider callback
and the final page.

Each handler parses the request, makes sure the browser is the flow's subject, calls one method of
``ConnectService`` (``authorize.py``, where the order of the callback's checks is explained) and
renders what it answers. The texts people read live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from litestar import Request, Response, get, post
from litestar.response import Template

from service.connect.authorize import CALLBACK_PATH, Connected, FinalPage, Refused, connection_values
from service.connect.deps import ConnectPageDeps
from service.connections.catalog import Parameter, describe_scope
from service.connections.per_connection import open_parameters, parameter_problems, with_parameters
from service.db.base import FLOW_ID
from service.domains import display_url_host
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, status_page
from service.grants.pages import grant_page, party_context
from service.i18n import N_, _, isolate
from service.signin.gate import redirect

Req = Request[Any, Any, Any]
KIND = "oauth_connect"


def problem_page(status: int, heading: str, text: str, flow: Flow | None = None) -> Response[Any]:
    return page(
        "connect_problem.html",
        status,
        heading=heading,
        text=text,
        flow_id=FLOW_ID.format(flow.id) if flow is not None else "-",
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# ---- connection parameters the person enters --------------------------------------------------------
FIELD_PREFIX = "param_"
MAX_PARAMETER_LENGTH = 200
_PARAMETER_ERRORS = {
    "missing": N_("Enter this to continue."),
    "pattern": N_("This is not in the expected form: use only what the example shows."),
}


@dataclass(frozen=True, slots=True)
class Asked:
    """The parameter step of the connect page: what the person entered, what is wrong with it, and
    whether every value checked out (the page then shows the resulting domain and the Continue)."""

    entered: dict[str, str]
    problems: dict[str, str]
    checked: bool


def _entered(form: dict[str, str], wanted: dict[str, Parameter]) -> dict[str, str]:
    return {
        name: form.get(FIELD_PREFIX + name, "").strip()[:MAX_PARAMETER_LENGTH]
        for name in wanted
        if form.get(FIELD_PREFIX + name, "").strip()
    }


def _fields(wanted: dict[str, Parameter], asked: Asked) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "label": _(parameter.title),
            "example": parameter.example,
            "value": asked.entered.get(name, ""),
            "error": _(_PARAMETER_ERRORS[asked.problems[name]]) if name in asked.problems else None,
        }
        for name, parameter in wanted.items()
    ]


# ---- the connect page ------------------------------------------------------------------------------
async def connect_page(
    request: Req, flow: Flow, services: ConnectPageDeps, asked: Asked | None = None, identity: Any = None
) -> Response[Any]:
    """``GET /f/{flow}`` for ``oauth_connect``: who asks, for which provider, for what, on which
    domain. A provider reached at an address of the account's own (Shopify's shop) whose MCP server
    did not name it first asks the person for it (``asked``: the step's state after a POST), then
    shows the domain it makes before the person goes on."""
    if identity is None:
        identity = await services.gate.require_subject(request, flow)
        if isinstance(identity, Response):
            return identity
        granting = await grant_page(request, flow, services, identity)
        if granting is not None:
            return granting  # the account is connected already: only this client's access is asked
    shown = await services.connect.connect_page(flow)
    provider = shown.provider
    flow_ref = FLOW_ID.format(flow.id)
    given = connection_values(flow)
    wanted = {name: p for name, p in open_parameters(provider).items() if name not in given}
    asked = asked or Asked(entered={}, problems={}, checked=False)
    fields = _fields(wanted, asked) if wanted else []
    ready = not wanted or asked.checked
    if ready and open_parameters(provider):
        provider = with_parameters(provider, connection_values(flow, asked.entered))
    scopes = [{"name": s, "words": describe_scope(s, provider.scope_descriptions)} for s in flow.scopes or []]
    headers = dict(PAGE_HEADERS)
    # ``no-referrer`` would make Chromium send ``Origin: null`` with the form POST, which the CSRF
    # check rightly refuses; same-origin still sends nothing to the provider or anyone else.
    headers["Referrer-Policy"] = "same-origin"
    # The Continue POST answers with a redirect to the provider; allow exactly that origin.
    headers["Content-Security-Policy"] = "default-src 'self'; frame-ancestors 'none'; form-action 'self'" + (
        " " + _origin(provider.authorization_endpoint) if ready else ""
    )
    context = {
        "flow_id": flow_ref,
        "client": shown.client,
        "provider": provider.display_name,
        "provider_host": display_url_host(provider.authorization_endpoint) if ready else None,
        # The parameter step: the fields (while a value is missing or wrong), then the values
        # checked, carried as hidden fields to the Continue.
        "parameter_fields": fields if not ready else [],
        "parameter_values": asked.entered if wanted and ready else {},
        "parameter_prefix": FIELD_PREFIX,
        "parameter_problem": bool(asked.problems),
        "change_link": f"/f/{flow_ref}" if wanted and ready else None,
        "scopes": scopes,
        "message": _("Connect your %(provider)s account to continue.", provider=provider.display_name)
        if flow.message == f"Connect your {provider.display_name} account to continue."
        else flow.message,
        "signed_in_as": identity.sub,
        "reconnect": flow.connection_id is not None,
        "csrf_token": identity.csrf_token,
        "continue_action": f"/connect/{flow_ref}/continue",
        "decline_action": f"/connect/{flow_ref}/decline",
        "kept_scopes": [
            {"name": s, "words": describe_scope(s, provider.scope_descriptions)}
            for s in await services.connect.kept_scopes(flow)
        ],
        **party_context(await services.grants.asking_party(flow.server_client_id)),
        # Shown beside the facts above, never in their place (base.html, docs/security.md).
        "client_brand": await services.brands.for_client(flow.server_client_id),
    }
    status = 400 if asked.problems else 200
    return Template(template_name="connect.html", context=context, headers=headers, status_code=status)


@post(
    "/connect/{flow_ref:str}/continue",
    operation_id="connectContinue",
    tags=["browser"],
    status_code=303,
    summary="Start the provider authorization (form POST from the connect page, CSRF-protected)",
)
async def connect_continue(request: Req, flow_ref: str, services: ConnectPageDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, KIND)
    if isinstance(checked, Response):
        return checked
    flow = checked.flow
    provider = (await services.connect.connect_page(flow)).provider
    given = connection_values(flow)
    wanted = {name: p for name, p in open_parameters(provider).items() if name not in given}
    entered = _entered(checked.form, wanted)
    if wanted:
        # Checked here, on the server, whatever the browser did; a value that does not match its
        # pattern never reaches a URL, and the person sees the domain before going on.
        problems = parameter_problems(provider, connection_values(flow, entered))
        if problems or checked.form.get("confirmed") != "1":
            asked = Asked(entered=entered, problems=problems, checked=not problems)
            return await connect_page(request, flow, services, asked, checked.identity)
    return redirect(await services.connect.start(flow, checked.identity.session_id, entered))


@post(
    "/connect/{flow_ref:str}/decline",
    operation_id="connectDecline",
    tags=["browser"],
    status_code=200,
    summary="Decline the connection (form POST from the connect page, CSRF-protected)",
)
async def connect_decline(request: Req, flow_ref: str, services: ConnectPageDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, KIND)
    if isinstance(checked, Response):
        return checked
    return final_page(await services.connect.decline(checked.flow))


# ---- the provider's redirect back -----------------------------------------------------------------
def refused_page(refused: Refused) -> Response[Any]:
    restart = _("Go back to your assistant and open its link again to start over.")
    provider = isolate(refused.provider or "")
    if refused.reason == "state_unusable":
        return problem_page(
            400,
            _("This sign-in response was already used"),
            _("It was used before, has expired, or was started in another browser.") + " " + restart,
            refused.flow,
        )
    if refused.reason in {"iss_missing", "iss_mismatch"}:
        return problem_page(
            400,
            _("The response did not come from the expected provider"),
            _(
                "elicitd expected an answer from %(provider)s and got something else, so it did not continue.",
                provider=provider,
            )
            + " "
            + restart,
            refused.flow,
        )
    if refused.reason == "account_mismatch":
        return problem_page(
            409,
            _("You signed in to %(provider)s as another account", provider=provider),
            _(
                "This link connects the %(provider)s account you connected before, and %(provider)s answered for a "
                "different one, so elicitd kept nothing and handed that access back. Open the link again and sign "
                "in to %(provider)s with the account you connected before.",
                provider=provider,
            ),
            refused.flow,
        )
    return problem_page(
        400, _("This sign-in response is not valid"), restart, refused.flow
    )  # state_invalid, code_missing


@get(
    CALLBACK_PATH,
    operation_id="connectCallback",
    tags=["browser"],
    cache=False,
    summary="The provider's redirect back (the one fixed redirect URI)",
)
async def connect_callback(request: Req, services: ConnectPageDeps) -> Response[Any]:
    query = request.query_params
    state = query.get("state")
    flow = await services.connect.callback_flow(state)
    if flow is None or state is None:
        return refused_page(Refused("state_invalid"))
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    outcome = await services.connect.callback(
        flow,
        state,
        browser_session_id=identity.session_id,
        iss=query.get("iss"),
        error=query.get("error"),
        code=query.get("code"),
        callback=dict(query),
    )
    if isinstance(outcome, Refused):
        return refused_page(outcome)
    if isinstance(outcome, Connected):
        # A redirect, so the code never stays in the address bar or history of the final page.
        return redirect(f"/connect/done/{FLOW_ID.format(outcome.flow.id)}")
    return final_page(outcome)


# ---- the final page --------------------------------------------------------------------------------
_HEADINGS = {
    "completed": N_("Connected"),
    "declined": N_("Not connected"),
    "failed": N_("The connection failed"),
    "expired": N_("This link has expired"),
    "cancelled": N_("Cancelled"),
}


def final_page(shown: FinalPage) -> Response[Any]:
    flow = shown.flow
    return page(
        "connect_done.html",
        200,
        heading=_(_HEADINGS.get(flow.status, N_("Unavailable"))),
        outcome=flow.status,
        client=shown.client,
        provider=shown.provider,
        account_login=(flow.result or {}).get("account_login") if flow.status == "completed" else None,
        flow_id=FLOW_ID.format(flow.id),
    )


@get(
    "/connect/done/{flow_ref:str}",
    operation_id="connectDone",
    tags=["browser"],
    cache=False,
    summary="The final page of a connection: no JavaScript, says where to go back to",
)
async def connect_done(request: Req, flow_ref: str, services: ConnectPageDeps) -> Response[Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await services.flows.read(flow_id)
    if flow is None or flow.kind != KIND:
        return status_page(None, 404)
    if flow.status == "pending":
        return redirect(f"/f/{flow_ref}")
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    return final_page(await services.connect.final_page(flow))


ROUTES = [connect_continue, connect_decline, connect_callback, connect_done]
