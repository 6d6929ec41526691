"""Admin API for webhook endpoints (``/admin/v1/server-clients/{id}/webhook-endpoints`` and
``/admin/v1/webhook-endpoints/{id}``) and their delivery attempts. Changes need ``admin``;
reading needs ``viewer``."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, patch, post
from litestar.params import Parameter

from service.admin import endpoints
from service.admin.deps import ADMIN, AdminDeps, in_unit, unit
from service.admin.endpoints import (
    AttemptPage,
    CreateEndpoint,
    EndpointPage,
    EndpointSecret,
    EndpointView,
    RotateEndpointSecret,
    UpdateEndpoint,
)


class AdminClientEndpointsController(Controller):
    path = "/server-clients/{client_id:str}/webhook-endpoints"
    tags = ["admin: webhook endpoints"]

    @get("/", operation_id="adminListWebhookEndpoints", summary="A server client's webhook endpoints")
    async def list_endpoints(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str
    ) -> EndpointPage:
        return await in_unit(services, endpoints.list_endpoints, client_id)

    @post(
        "/",
        operation_id="adminCreateWebhookEndpoint",
        opt=ADMIN,
        summary="Add an endpoint (pending until it answers the verification challenge); its secret is shown once",
    )
    async def create(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str, data: CreateEndpoint
    ) -> EndpointSecret:
        created = await in_unit(services, endpoints.create, services.vault, client_id, data)
        services.webhooks.wake()
        return created


class AdminEndpointsController(Controller):
    path = "/webhook-endpoints"
    tags = ["admin: webhook endpoints"]

    @get("/{endpoint_id:str}", operation_id="adminGetWebhookEndpoint", summary="One webhook endpoint")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str) -> EndpointView:
        return await in_unit(services, endpoints.show, endpoint_id)

    @patch(
        "/{endpoint_id:str}",
        operation_id="adminUpdateWebhookEndpoint",
        opt=ADMIN,
        summary="Change the URL (verified again before use) or the event types",
    )
    async def update(
        self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str, data: UpdateEndpoint
    ) -> EndpointView:
        updated = await in_unit(services, endpoints.update, endpoint_id, data)
        services.webhooks.wake()
        return updated

    @delete(
        "/{endpoint_id:str}",
        operation_id="adminDeleteWebhookEndpoint",
        opt=ADMIN,
        summary="Remove an endpoint, its queued deliveries and its attempt log",
    )
    async def remove(self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str) -> None:
        async with unit(services) as session:
            await endpoints.delete(session, endpoint_id)

    @post(
        "/{endpoint_id:str}/rotate-secret",
        operation_id="adminRotateWebhookEndpointSecret",
        status_code=200,
        opt=ADMIN,
        summary="A new signing secret (shown once); the previous one also signs for `grace_seconds`",
    )
    async def rotate_secret(
        self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str, data: RotateEndpointSecret
    ) -> EndpointSecret:
        async with unit(services) as session:
            return await endpoints.rotate_secret(
                session, services.vault, endpoint_id, data, services.webhooks.settings.rotation_grace_seconds
            )

    @post(
        "/{endpoint_id:str}/enable",
        operation_id="adminEnableWebhookEndpoint",
        status_code=200,
        opt=ADMIN,
        summary="Re-enable a suspended or disabled endpoint: it must answer the challenge again",
    )
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str) -> EndpointView:
        enabled = await in_unit(services, endpoints.enable, endpoint_id)
        services.webhooks.wake()
        return enabled

    @post(
        "/{endpoint_id:str}/disable",
        operation_id="adminDisableWebhookEndpoint",
        status_code=200,
        opt=ADMIN,
        summary="Stop sending to an endpoint (its queued deliveries are held)",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, endpoint_id: str) -> EndpointView:
        return await in_unit(services, endpoints.disable, endpoint_id)

    @get(
        "/{endpoint_id:str}/attempts",
        operation_id="adminListWebhookAttempts",
        summary="Delivery attempts to this endpoint, newest first: time, HTTP status, duration, error class",
    )
    async def attempts(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        endpoint_id: str,
        cursor: str | None = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
    ) -> AttemptPage:
        return await in_unit(services, endpoints.list_attempts, endpoint_id, cursor=cursor, limit=limit)


ENDPOINT_CONTROLLERS = [AdminClientEndpointsController, AdminEndpointsController]
