"""Admin API for server clients (``/admin/v1/server-clients``). Changing a client — its keys, its
webhook, its limits — needs the ``admin`` role; reading needs ``viewer``."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from litestar import Controller, Request, get, patch, post, put
from litestar.params import Parameter

from service.admin import clients
from service.admin.deps import ADMIN, AdminDeps, in_unit
from service.admin.schemas import (
    CreatedServerClient,
    CreateServerClient,
    RotatedKey,
    RotateKey,
    ServerClientPage,
    ServerClientView,
    SetWebhook,
    UpdateServerClient,
    WebhookSecret,
)


class AdminServerClientsController(Controller):
    path = "/server-clients"
    tags = ["admin: server clients"]

    @get("/", operation_id="adminListServerClients", summary="Server clients, newest first")
    async def list_clients(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        cursor: str | None = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
    ) -> ServerClientPage:
        return await in_unit(services, clients.list_clients, cursor=cursor, limit=limit)

    @post(
        "/",
        operation_id="adminCreateServerClient",
        opt=ADMIN,
        summary="Register an MCP server; its API key is in this response only",
    )
    async def create(
        self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateServerClient
    ) -> CreatedServerClient:
        return await in_unit(services, clients.create, data)

    @get("/{client_id:str}", operation_id="adminGetServerClient", summary="One server client and its keys")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str) -> ServerClientView:
        return await in_unit(services, clients.show, client_id)

    @patch(
        "/{client_id:str}",
        operation_id="adminUpdateServerClient",
        opt=ADMIN,
        summary="Change display name, allowed providers, trusted issuers or rate limits",
    )
    async def update(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str, data: UpdateServerClient
    ) -> ServerClientView:
        view = await in_unit(services, clients.update_client, client_id, data)
        services.authenticator.forget()
        return view

    @post(
        "/{client_id:str}/disable",
        operation_id="adminDisableServerClient",
        status_code=200,
        opt=ADMIN,
        summary="Disable a server client: its API keys stop working",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str) -> ServerClientView:
        view = await in_unit(services, clients.set_disabled, client_id, True)
        services.authenticator.forget()
        return view

    @post(
        "/{client_id:str}/enable",
        operation_id="adminEnableServerClient",
        status_code=200,
        opt=ADMIN,
        summary="Enable a disabled server client",
    )
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str) -> ServerClientView:
        return await in_unit(services, clients.set_disabled, client_id, False)

    @post(
        "/{client_id:str}/keys/rotate",
        operation_id="adminRotateServerClientKey",
        status_code=200,
        opt=ADMIN,
        summary="Issue a new API key; older keys keep working for `grace_seconds`",
    )
    async def rotate_key(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str, data: RotateKey
    ) -> RotatedKey:
        rotated = await in_unit(services, clients.rotate_key, client_id, timedelta(seconds=data.grace_seconds))
        services.authenticator.forget()
        return rotated

    @put(
        "/{client_id:str}/webhook",
        operation_id="adminSetServerClientWebhook",
        opt=ADMIN,
        summary="Set (or clear with null) the webhook and the event types it receives; a new signing secret "
        "is shown once; a new URL receives events once it has answered the verification challenge",
    )
    async def set_webhook(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str, data: SetWebhook
    ) -> WebhookSecret:
        set_to = await in_unit(services, clients.set_webhook, services.vault, client_id, data.url, data.events)
        services.webhooks.wake()  # on a replica running its upkeep, a new URL is challenged now
        return set_to

    @post(
        "/{client_id:str}/webhook/rotate-secret",
        operation_id="adminRotateWebhookSecret",
        status_code=200,
        opt=ADMIN,
        summary="Replace the webhook signing secret; the new one is shown once",
    )
    async def rotate_webhook_secret(
        self, request: Request[Any, Any, Any], services: AdminDeps, client_id: str
    ) -> WebhookSecret:
        return await in_unit(services, clients.rotate_webhook_secret, services.vault, client_id)
