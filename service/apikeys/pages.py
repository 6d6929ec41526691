"""Browser side of ``api_key``: the form (a password field plus the provider's extra fields) and its POST.

The key arrives only in this POST body. A rejected entry re-renders the form with a message and
the non-secret fields filled in again — the key field always comes back empty, so the key never
appears in any page elicitd sends.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from service.apikeys.deps import ApiKeyDeps
from service.apikeys.service import ApiKeyForm, ApiKeyNotTaken
from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import page, status_page
from service.grants.pages import grant_page
from service.i18n import _
from service.signin.gate import BrowserIdentity

Req = Request[Any, Any, Any]


def _form(flow: Flow, identity: BrowserIdentity, shown: ApiKeyForm) -> Response[Any]:
    flow_ref = FLOW_ID.format(flow.id)
    return page(
        "api_key.html",
        200 if shown.error is None else 422,
        flow_id=flow_ref,
        client=shown.client,
        provider=shown.provider,
        config=shown.provider.config,
        csrf_token=identity.csrf_token,
        action=f"/f/{flow_ref}/api-key",
        error=shown.error,
        values=shown.values,
    )


async def api_key_page(request: Req, flow: Flow, services: ApiKeyDeps) -> Response[Any]:
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    granting = await grant_page(request, flow, services, identity)
    if granting is not None:
        return granting  # a key is stored already: only this client's use of it is asked
    shown = await services.apikeys.form(flow)
    if shown is None:
        return page(
            "flow_status.html",
            503,
            heading=_("Not available"),
            text=_("This service is not set up on elicitd any more. Ask your assistant to try again later."),
            flow_id=FLOW_ID.format(flow.id),
        )
    return _form(flow, identity, shown)


@post(
    "/f/{flow_ref:str}/api-key",
    operation_id="submitApiKey",
    tags=["browser"],
    status_code=200,
    summary="Submit an API key (form POST, CSRF-protected); the key is stored encrypted, never echoed",
)
async def submit_api_key(request: Req, flow_ref: str, services: ApiKeyDeps) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "api_key")
    if isinstance(checked, Response):
        return checked
    outcome = await services.apikeys.submit(checked.flow, checked.form)
    if outcome is None:
        return page(
            "flow_status.html",
            503,
            heading=_("Not available"),
            text=_("This service is not set up on elicitd any more."),
            flow_id=flow_ref,
        )
    if isinstance(outcome, ApiKeyForm):
        return _form(checked.flow, checked.identity, outcome)
    if isinstance(outcome, ApiKeyNotTaken):
        return status_page(outcome.current, 200)
    return page("api_key_done.html", flow_id=flow_ref, client=outcome.client, provider=outcome.provider)
