"""Browser side of ``api_key``: the form (a password field plus the provider's extra fields) and its POST.

The key arrives only in this POST body. A rejected entry re-renders the form with a message and
the non-secret fields filled in again — the key field always comes back empty, so the key never
appears in any page elicitd sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Request, Response, post

from service.apikeys.providers import ApiKeyProvider, get_api_key_provider
from service.apikeys.service import ApiKeyService, EntryRejected, validate_entry
from service.consent.pages import client_names
from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import page, status_page
from service.flows.states import Actor
from service.signin.gate import BrowserIdentity

if TYPE_CHECKING:
    from service.services import Services

Req = Request[Any, Any, Any]


async def _provider(services: Services, flow: Flow) -> ApiKeyProvider | None:
    async with services.read_sessions() as session:
        found = await get_api_key_provider(session, flow.provider or "")
    return found if found is not None and found.enabled else None


async def _form(
    services: Services,
    flow: Flow,
    identity: BrowserIdentity,
    provider: ApiKeyProvider,
    *,
    status: int = 200,
    error: EntryRejected | None = None,
    values: dict[str, str] | None = None,
) -> Response[Any]:
    display_name, _ = await client_names(services, flow)
    flow_ref = FLOW_ID.format(flow.id)
    return page(
        "api_key.html",
        status,
        flow_id=flow_ref,
        client=display_name,
        provider=provider,
        config=provider.config,
        csrf_token=identity.csrf_token,
        action=f"/f/{flow_ref}/api-key",
        error=error,
        values=values or {},
    )


async def api_key_page(request: Req, flow: Flow, services: Services) -> Response[Any]:
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    provider = await _provider(services, flow)
    if provider is None:
        return page(
            "flow_status.html",
            503,
            heading="Not available",
            text="This service is not set up on elicitd any more. Ask your assistant to try again later.",
            flow_id=FLOW_ID.format(flow.id),
        )
    return await _form(services, flow, identity, provider)


@post(
    "/f/{flow_ref:str}/api-key",
    operation_id="submitApiKey",
    tags=["browser"],
    status_code=200,
    summary="Submit an API key (form POST, CSRF-protected); the key is stored encrypted, never echoed",
)
async def submit_api_key(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, "api_key")
    if isinstance(checked, Response):
        return checked
    found, identity, form = checked.flow, checked.identity, checked.form
    provider = await _provider(services, found)
    if provider is None:
        return page(
            "flow_status.html",
            503,
            heading="Not available",
            text="This service is not set up on elicitd any more.",
            flow_id=flow_ref,
        )
    values = {f.name: form.get(f"field_{f.name}") for f in provider.config.fields}
    service: ApiKeyService = services.apikeys
    try:
        key, fields = validate_entry(provider.config, form.get("secret"), values)
        await service.live_check(provider, key, fields)
    except EntryRejected as rejected:
        async with services.flows.unit_of_work() as uow:
            await uow.event(found.id, "api_key_rejected", Actor.BROWSER, {"reason": rejected.reason})
        kept = {k: v for k, v in values.items() if v is not None}
        return await _form(services, found, identity, provider, status=422, error=rejected, values=kept)
    moved = await service.store(found, provider, key, fields)
    if moved is None:
        return status_page(await services.flows.read(found.id), 200)
    display_name, _ = await client_names(services, found)
    return page("api_key_done.html", flow_id=flow_ref, client=display_name, provider=provider)
