"""Console pages for server clients (``/console/clients``): the list, one client's page, and
creating, rotating a key, disabling, enabling and changing a client.

Every action calls the service function its admin API route calls (``service.admin.clients``),
in one unit of work, with the request body that route takes (``client_forms``), and names the API
operation it mirrors (``opt["audit"]``), so its audit row is that route's. Reading needs viewer;
every change needs admin, as in the API. A new or rotated API key is shown once
(``client_pages.secret_page``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from litestar import Request, get, post
from litestar.response import Response

from service.admin import clients, deliveries, endpoints
from service.admin.deps import AdminDeps, in_unit
from service.admin.endpoints import CreateEndpoint
from service.admin.schemas import CreateServerClient, RotateKey, UpdateServerClient
from service.console.client_forms import FormError, body, grace_seconds, weaker_unconfirmed
from service.console.client_pages import (
    ADMIN_CHANGE,
    PAGE,
    attempt,
    form_of,
    missing,
    notice,
    page,
    redirect,
    secret_page,
)
from service.i18n import N_, _

RECENT_DELIVERIES = 10
NAV = (30, "/console/clients", N_("Server clients"))
AnyRequest = Request[Any, Any, Any]

_EMPTY = {
    "name": "",
    "display_name": "",
    "allowed_providers": [],
    "trusted_issuers": [],
    "resource_uris": [],
    "subject_proof": "required",
    "flows_per_minute": "",
    "pending_per_subject": "",
    "confirm_weaker": False,
}


@get("/clients", name="console-clients")
async def list_page(
    request: AnyRequest, services: AdminDeps, cursor: str | None = None, active: str | None = None
) -> Response[Any]:
    async def load(session: Any) -> tuple[Any, dict[str, Any]]:
        listed = await clients.list_clients(session, cursor=cursor, limit=PAGE, include_disabled=not active)
        hooks = {c.id: (await endpoints.list_endpoints(session, c.id)).items for c in listed.items}
        return listed, hooks

    found = await attempt(lambda: in_unit(services, load))
    if isinstance(found, FormError):
        return missing(request, found)
    listed, hooks = found
    return page(
        "console/clients.html",
        request,
        clients=listed.items,
        endpoints=hooks,
        next_cursor=listed.next_cursor,
        only_active=bool(active),
    )


@get("/clients/new", name="console-client-new", opt=ADMIN_CHANGE)
async def new_page(request: AnyRequest) -> Response[Any]:
    return page("console/clients_new.html", request, values=_EMPTY, error=None)


@post("/clients", name="console-client-create", opt={**ADMIN_CHANGE, "audit": "adminCreateServerClient"})
async def create(request: AnyRequest, services: AdminDeps) -> Response[Any]:
    form = await form_of(request)
    values = {
        "name": form.get("name"),
        "display_name": form.get("display_name") or None,
        "allowed_providers": form.lines("allowed_providers"),
        "trusted_issuers": form.lines("trusted_issuers"),
        "subject_proof": form.get("subject_proof") or "required",
        "resource_uris": form.lines("resource_uris"),
        "flows_per_minute": form.limit("flows_per_minute"),
        "pending_per_subject": form.limit("pending_per_subject"),
    }
    shown = {**values, "confirm_weaker": form.checked("confirm_weaker")}
    for name in ("display_name", "flows_per_minute", "pending_per_subject"):
        shown[name] = "" if values[name] is None else values[name]
    error: FormError | None = None
    if values["subject_proof"] == "none" and not form.checked("confirm_weaker"):
        error = weaker_unconfirmed()
    else:
        created = await attempt(lambda: in_unit(services, clients.create, body(CreateServerClient, values)))
        if not isinstance(created, FormError):
            return secret_page(
                request,
                client=created.client,
                secret=created.api_key,
                heading=_("The new server client's API key"),
                secret_label=_("API key"),
            )
        error = created
    return page("console/clients_new.html", request, status=error.status, values=shown, error=error)


async def _detail(
    request: AnyRequest,
    services: AdminDeps,
    client_id: str,
    *,
    error: FormError | None = None,
    done: str | None = None,
    open_section: str | None = None,
    proof_value: str | None = None,
) -> Response[Any]:
    """The client's page; after a refused change, with the refusal and the changed section open."""

    async def load(session: Any) -> tuple[Any, Any, Any]:
        client = await clients.show(session, client_id)
        hooks = await endpoints.list_endpoints(session, client.id)
        recent = await deliveries.list_deliveries(
            session, state=None, server_client=client.id, flow=None, cursor=None, limit=RECENT_DELIVERIES
        )
        return client, hooks.items, recent.items

    found = await attempt(lambda: in_unit(services, load))
    if isinstance(found, FormError):
        return missing(request, found)
    client, hooks, recent = found
    return page(
        "console/clients_detail.html",
        request,
        status=error.status if error else 200,
        client=client,
        endpoints=hooks,
        deliveries=recent,
        error=error,
        notice=notice(done),
        open=open_section,
        proof_value=proof_value,
    )


@get("/clients/{client_id:str}", name="console-client")
async def detail_page(
    request: AnyRequest, services: AdminDeps, client_id: str, done: str | None = None
) -> Response[Any]:
    return await _detail(request, services, client_id, done=done)


@post(
    "/clients/{client_id:str}/keys/rotate",
    name="console-client-rotate-key",
    opt={**ADMIN_CHANGE, "audit": "adminRotateServerClientKey"},
)
async def rotate_key(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    form = await form_of(request)

    async def run() -> Any:
        data = body(RotateKey, {"grace_seconds": grace_seconds(form)})
        return await in_unit(services, clients.rotate_key, client_id, timedelta(seconds=data.grace_seconds))

    rotated = await attempt(run)
    if isinstance(rotated, FormError):
        return await _detail(request, services, client_id, error=rotated)
    services.authenticator.forget()
    return secret_page(
        request,
        client=rotated.client,
        secret=rotated.api_key,
        heading=_("The new API key"),
        secret_label=_("API key"),
        old_keys_expire_at=rotated.old_keys_expire_at,
    )


async def _set_disabled(request: AnyRequest, services: AdminDeps, client_id: str, disabled: bool) -> Response[Any]:
    done = await attempt(lambda: in_unit(services, clients.set_disabled, client_id, disabled))
    if isinstance(done, FormError):
        return await _detail(request, services, client_id, error=done)
    if disabled:
        services.authenticator.forget()
    return redirect(f"/console/clients/{client_id}", "disabled" if disabled else "enabled")


@post(
    "/clients/{client_id:str}/disable",
    name="console-client-disable",
    opt={**ADMIN_CHANGE, "audit": "adminDisableServerClient"},
)
async def disable(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    return await _set_disabled(request, services, client_id, True)


@post(
    "/clients/{client_id:str}/enable",
    name="console-client-enable",
    opt={**ADMIN_CHANGE, "audit": "adminEnableServerClient"},
)
async def enable(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    return await _set_disabled(request, services, client_id, False)


async def _update(
    request: AnyRequest,
    services: AdminDeps,
    client_id: str,
    values: dict[str, Any],
    section: str,
    proof_value: str | None = None,
) -> Response[Any]:
    done = await attempt(lambda: in_unit(services, clients.update_client, client_id, body(UpdateServerClient, values)))
    if isinstance(done, FormError):
        return await _detail(request, services, client_id, error=done, open_section=section, proof_value=proof_value)
    services.authenticator.forget()
    return redirect(f"/console/clients/{client_id}", "saved")


# Three forms, one API operation: each sends only its own fields, as a PATCH would.
_UPDATE = {**ADMIN_CHANGE, "audit": "adminUpdateServerClient"}


@post("/clients/{client_id:str}/access", name="console-client-access", opt=_UPDATE)
async def edit_access(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    form = await form_of(request)
    values = {"allowed_providers": form.lines("allowed_providers"), "trusted_issuers": form.lines("trusted_issuers")}
    return await _update(request, services, client_id, values, "access")


@post("/clients/{client_id:str}/subject-proof", name="console-client-subject-proof", opt=_UPDATE)
async def edit_subject_proof(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    """Choosing no subject proof needs the box under its warning ticked: a client whose key alone
    names any user is a choice made knowingly, never by a stray click."""
    form = await form_of(request)
    mode = form.get("subject_proof")
    if mode == "none" and not form.checked("confirm_weaker"):
        return await _detail(
            request, services, client_id, error=weaker_unconfirmed(), open_section="proof", proof_value=mode
        )
    values = {"subject_proof": mode, "resource_uris": form.lines("resource_uris")}
    return await _update(request, services, client_id, values, "proof", proof_value=mode)


@post("/clients/{client_id:str}/limits", name="console-client-limits", opt=_UPDATE)
async def edit_limits(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    form = await form_of(request)
    values = {
        "flows_per_minute": form.limit("flows_per_minute"),
        "pending_per_subject": form.limit("pending_per_subject"),
    }
    return await _update(request, services, client_id, values, "limits")


@post(
    "/clients/{client_id:str}/webhook-endpoints",
    name="console-endpoint-create",
    opt={**ADMIN_CHANGE, "audit": "adminCreateWebhookEndpoint"},
)
async def create_endpoint(request: AnyRequest, services: AdminDeps, client_id: str) -> Response[Any]:
    form = await form_of(request)

    async def run() -> Any:
        data = body(CreateEndpoint, {"url": form.get("url"), "events": form.all("events") or None})
        created = await in_unit(services, endpoints.create, services.vault, client_id, data)
        return created, await in_unit(services, clients.show, client_id)

    done = await attempt(run)
    if isinstance(done, FormError):
        return await _detail(request, services, client_id, error=done, open_section="endpoint")
    created, client = done
    services.webhooks.wake()
    return secret_page(
        request,
        client=client,
        secret=created.secret,
        heading=_("The new endpoint's signing secret"),
        secret_label=_("Signing secret"),
        endpoint=created.endpoint,
    )


ROUTES = [
    list_page,
    new_page,
    create,
    detail_page,
    rotate_key,
    disable,
    enable,
    edit_access,
    edit_subject_proof,
    edit_limits,
    create_endpoint,
]
