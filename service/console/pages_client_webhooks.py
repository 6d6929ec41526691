"""Console pages for a server client's webhook endpoints and deliveries: an endpoint's page with
its attempts, adding, changing, rotating the secret of, enabling, disabling and deleting an
endpoint, a client's deliveries and *Replay*.

As on the client pages, each action calls the admin API route's own service function
(``service.admin.endpoints``, ``deliveries``) and names the operation it mirrors, so its audit
row is that route's. A replay needs operator; an endpoint change needs admin, as in the API. A new
signing secret is shown once (``client_pages.secret_page``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import Parameter
from litestar.response import Response

from service.admin import clients, deliveries, endpoints
from service.admin.deps import OPERATOR, AdminDeps, in_unit
from service.admin.endpoints import RotateEndpointSecret, UpdateEndpoint
from service.console.client_forms import FormError, body, grace_seconds
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
from service.i18n import _

DELIVERY_STATES = ("pending", "in_flight", "delivered", "abandoned")
AnyRequest = Request[Any, Any, Any]


async def _endpoint(
    request: AnyRequest,
    services: AdminDeps,
    endpoint_id: str,
    *,
    cursor: str | None = None,
    error: FormError | None = None,
    done: str | None = None,
    open_section: str | None = None,
) -> Response[Any]:
    async def load(session: Any) -> tuple[Any, Any, Any]:
        endpoint = await endpoints.show(session, endpoint_id)
        client = await clients.show(session, endpoint.server_client)
        return endpoint, client, await endpoints.list_attempts(session, endpoint_id, cursor=cursor, limit=PAGE)

    found = await attempt(lambda: in_unit(services, load))
    if isinstance(found, FormError):
        return missing(request, found)
    endpoint, client, attempts = found
    return page(
        "console/clients_endpoint.html",
        request,
        status=error.status if error else 200,
        endpoint=endpoint,
        client=client,
        attempts=attempts.items,
        next_cursor=attempts.next_cursor,
        error=error,
        notice=notice(done),
        open=open_section,
    )


@get("/webhook-endpoints/{endpoint_id:str}", name="console-endpoint")
async def endpoint_page(
    request: AnyRequest,
    services: AdminDeps,
    endpoint_id: str,
    cursor: str | None = None,
    done: str | None = None,
) -> Response[Any]:
    return await _endpoint(request, services, endpoint_id, cursor=cursor, done=done)


async def _endpoint_action(
    request: AnyRequest,
    services: AdminDeps,
    endpoint_id: str,
    action: Callable[[], Awaitable[Any]],
    done: str,
    section: str | None = None,
) -> Response[Any]:
    finished = await attempt(action)
    if isinstance(finished, FormError):
        return await _endpoint(request, services, endpoint_id, error=finished, open_section=section)
    return redirect(f"/console/webhook-endpoints/{endpoint_id}", done)


@post(
    "/webhook-endpoints/{endpoint_id:str}/edit",
    name="console-endpoint-edit",
    opt={**ADMIN_CHANGE, "audit": "adminUpdateWebhookEndpoint"},
)
async def edit_endpoint(request: AnyRequest, services: AdminDeps, endpoint_id: str) -> Response[Any]:
    form = await form_of(request)

    async def run() -> Any:
        data = body(UpdateEndpoint, {"url": form.get("url"), "events": form.all("events") or None})
        updated = await in_unit(services, endpoints.update, endpoint_id, data)
        services.webhooks.wake()
        return updated

    return await _endpoint_action(request, services, endpoint_id, run, "endpoint_saved", "edit")


@post(
    "/webhook-endpoints/{endpoint_id:str}/rotate-secret",
    name="console-endpoint-rotate-secret",
    opt={**ADMIN_CHANGE, "audit": "adminRotateWebhookEndpointSecret"},
)
async def rotate_endpoint_secret(request: AnyRequest, services: AdminDeps, endpoint_id: str) -> Response[Any]:
    form = await form_of(request)

    async def run() -> Any:
        data = body(RotateEndpointSecret, {"grace_seconds": grace_seconds(form)})
        grace = services.webhooks.settings.rotation_grace_seconds
        rotated = await in_unit(services, endpoints.rotate_secret, services.vault, endpoint_id, data, grace)
        return rotated, await in_unit(services, clients.show, rotated.endpoint.server_client)

    done = await attempt(run)
    if isinstance(done, FormError):
        return await _endpoint(request, services, endpoint_id, error=done)
    rotated, client = done
    return secret_page(
        request,
        client=client,
        secret=rotated.secret,
        heading=_("The endpoint's new signing secret"),
        secret_label=_("Signing secret"),
        endpoint=rotated.endpoint,
    )


@post(
    "/webhook-endpoints/{endpoint_id:str}/enable",
    name="console-endpoint-enable",
    opt={**ADMIN_CHANGE, "audit": "adminEnableWebhookEndpoint"},
)
async def enable_endpoint(request: AnyRequest, services: AdminDeps, endpoint_id: str) -> Response[Any]:
    async def run() -> Any:
        enabled = await in_unit(services, endpoints.enable, endpoint_id)
        services.webhooks.wake()
        return enabled

    return await _endpoint_action(request, services, endpoint_id, run, "endpoint_enabled")


@post(
    "/webhook-endpoints/{endpoint_id:str}/disable",
    name="console-endpoint-disable",
    opt={**ADMIN_CHANGE, "audit": "adminDisableWebhookEndpoint"},
)
async def disable_endpoint(request: AnyRequest, services: AdminDeps, endpoint_id: str) -> Response[Any]:
    def run() -> Awaitable[Any]:
        return in_unit(services, endpoints.disable, endpoint_id)

    return await _endpoint_action(request, services, endpoint_id, run, "endpoint_disabled")


@post(
    "/webhook-endpoints/{endpoint_id:str}/delete",
    name="console-endpoint-delete",
    opt={**ADMIN_CHANGE, "audit": "adminDeleteWebhookEndpoint"},
)
async def delete_endpoint(request: AnyRequest, services: AdminDeps, endpoint_id: str) -> Response[Any]:
    async def remove(session: Any) -> str:
        owner = (await endpoints.show(session, endpoint_id)).server_client
        await endpoints.delete(session, endpoint_id)
        return owner

    owner = await attempt(lambda: in_unit(services, remove))
    if isinstance(owner, FormError):
        return await _endpoint(request, services, endpoint_id, error=owner)
    return redirect(f"/console/clients/{owner}", "endpoint_deleted")


async def _deliveries(
    request: AnyRequest,
    services: AdminDeps,
    client_id: str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    done: str | None = None,
    error: FormError | None = None,
) -> Response[Any]:
    async def load(session: Any) -> tuple[Any, Any]:
        client = await clients.show(session, client_id)
        found = await deliveries.list_deliveries(
            session, state=state or None, server_client=client.id, flow=None, cursor=cursor, limit=PAGE
        )
        return client, found

    found = await attempt(lambda: in_unit(services, load))
    if isinstance(found, FormError):
        return missing(request, found)
    client, listed = found
    return page(
        "console/clients_deliveries.html",
        request,
        status=error.status if error else 200,
        client=client,
        deliveries=listed.items,
        next_cursor=listed.next_cursor,
        state=state or "",
        delivery_states=DELIVERY_STATES,
        notice=notice(done),
        error=error,
    )


@get("/clients/{client_id:str}/deliveries", name="console-client-deliveries")
async def deliveries_page(
    request: AnyRequest,
    services: AdminDeps,
    client_id: str,
    delivery_state: Annotated[str | None, Parameter(query="state")] = None,
    cursor: str | None = None,
    done: str | None = None,
) -> Response[Any]:
    return await _deliveries(request, services, client_id, state=delivery_state, cursor=cursor, done=done)


@post(
    "/webhooks/{delivery_id:str}/replay",
    name="console-delivery-replay",
    opt={**OPERATOR, "audit": "adminReplayWebhookDelivery"},
)
async def replay(request: AnyRequest, services: AdminDeps, delivery_id: str) -> Response[Any]:
    """Back to the client's deliveries, where the replayed one now shows as pending."""
    done = await attempt(lambda: in_unit(services, deliveries.replay, delivery_id))
    if isinstance(done, FormError):
        owner = await attempt(lambda: in_unit(services, deliveries.show_delivery, delivery_id))
        if isinstance(owner, FormError):
            return missing(request, done)
        return await _deliveries(request, services, owner.server_client, error=done)
    services.webhooks.wake()
    return redirect(f"/console/clients/{done.server_client}/deliveries", "replayed")


ROUTES = [
    endpoint_page,
    edit_endpoint,
    rotate_endpoint_secret,
    enable_endpoint,
    disable_endpoint,
    delete_endpoint,
    deliveries_page,
    replay,
]
