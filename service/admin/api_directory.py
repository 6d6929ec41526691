"""Admin API over the other domains' tables: providers, issuers, connections and payments.

Thin handlers over ``service.admin.directory``, ``.connections`` and ``.payments``, which the
CLI and the console run too. Views name safe columns one by one (never a token or a client secret,
only whether one is set). Changing a provider or issuer drops this process's cached discovery
metadata (``directory_actions`` does it).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get, patch, post
from litestar.params import Parameter

from service.admin import connections, directory, directory_actions, payments, reconnect_links
from service.admin.deps import ADMIN, OPERATOR, AdminDeps, in_unit, unit
from service.admin.directory import (
    CreateIssuer,
    CreateProvider,
    DiscoveryReport,
    IssuerView,
    ProviderView,
    UpdateIssuer,
    UpdateProvider,
)

Limit = Annotated[int, Parameter(ge=1, le=500, default=50, description="Page size")]


class IssuerRef(msgspec.Struct, forbid_unknown_fields=True):
    issuer: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class AdminProvidersController(Controller):
    path = "/providers"
    tags = ["admin: providers"]

    @get("/", operation_id="adminListProviders", summary="Third-party OAuth providers (never their secrets)")
    async def list_providers(self, request: Request[Any, Any, Any], services: AdminDeps) -> list[ProviderView]:
        return await in_unit(services, directory.list_provider_views)

    @post(
        "/",
        operation_id="adminCreateProvider",
        status_code=201,
        opt=ADMIN,
        summary="Create a provider from a catalog entry; the client secret is write-only (409 if the name exists)",
    )
    async def create(self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateProvider) -> ProviderView:
        return await directory_actions.add_provider(services, data)

    @get("/{name:str}", operation_id="adminGetProvider", summary="One provider (never its secret)")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        return await in_unit(services, directory.show_provider, name)

    @patch(
        "/{name:str}",
        operation_id="adminUpdateProvider",
        opt=ADMIN,
        summary="Change fields of a provider; a secret not given is kept",
    )
    async def update(
        self, request: Request[Any, Any, Any], services: AdminDeps, name: str, data: UpdateProvider
    ) -> ProviderView:
        return await directory_actions.change_provider(services, name, data)

    @post(
        "/{name:str}/disable",
        operation_id="adminDisableProvider",
        status_code=200,
        opt=ADMIN,
        summary="Disable a provider: no new connect flows",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        return await directory_actions.switch_provider(services, name, False)

    @post(
        "/{name:str}/enable",
        operation_id="adminEnableProvider",
        status_code=200,
        opt=ADMIN,
        summary="Enable a provider",
    )
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        return await directory_actions.switch_provider(services, name, True)

    @post(
        "/{name:str}/test-discovery",
        operation_id="adminTestProviderDiscovery",
        status_code=200,
        opt=OPERATOR,
        summary="Fetch the provider's metadata now and show the endpoints a connect would use",
    )
    async def test_discovery(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> DiscoveryReport:
        return await directory.check_provider_discovery(services.read_sessions, services.vault, services.http, name)


class AdminIssuersController(Controller):
    path = "/issuers"
    tags = ["admin: issuers"]

    @get("/", operation_id="adminListIssuers", summary="Trusted identity issuers (never their secrets)")
    async def list_issuers(self, request: Request[Any, Any, Any], services: AdminDeps) -> list[IssuerView]:
        return await in_unit(services, directory.list_issuer_views)

    @post(
        "/",
        operation_id="adminCreateIssuer",
        status_code=201,
        opt=ADMIN,
        summary="Trust an OIDC issuer; the client secret is write-only (409 if it is registered)",
    )
    async def create(self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateIssuer) -> IssuerView:
        return await directory_actions.add_issuer(services, data)

    @patch(
        "/",
        operation_id="adminUpdateIssuer",
        opt=ADMIN,
        summary="Change fields of the issuer named by `issuer`; a secret not given is kept",
    )
    async def update(self, request: Request[Any, Any, Any], services: AdminDeps, data: UpdateIssuer) -> IssuerView:
        return await directory_actions.change_issuer(services, data)

    @post(
        "/disable",
        operation_id="adminDisableIssuer",
        status_code=200,
        opt=ADMIN,
        summary="Disable an issuer (its browser sessions end at once)",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, data: IssuerRef) -> dict[str, bool]:
        await directory_actions.switch_issuer(services, data.issuer, False)
        return {"enabled": False}

    @post("/enable", operation_id="adminEnableIssuer", status_code=200, opt=ADMIN, summary="Enable an issuer")
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, data: IssuerRef) -> dict[str, bool]:
        await directory_actions.switch_issuer(services, data.issuer, True)
        return {"enabled": True}

    @post(
        "/test-discovery",
        operation_id="adminTestIssuerDiscovery",
        status_code=200,
        opt=OPERATOR,
        summary="Fetch the issuer's OpenID configuration now and show the endpoints a login would use",
    )
    async def test_discovery(
        self, request: Request[Any, Any, Any], services: AdminDeps, data: IssuerRef
    ) -> DiscoveryReport:
        return await directory.check_issuer_discovery(services.read_sessions, services.issuers, data.issuer)


class AdminConnectionsController(Controller):
    path = "/connections"
    tags = ["admin: connections"]

    @get("/", operation_id="adminListConnections", summary="Connections, newest first (never their tokens)")
    async def list_connections(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        provider: str | None = None,
        subject_iss: str | None = None,
        subject_sub: str | None = None,
        status: str | None = None,
        health: str | None = None,
        cursor: str | None = None,
        limit: Limit = 50,
    ) -> connections.ConnectionPage:
        async with unit(services) as session:
            return await connections.list_connections(
                session,
                provider=provider,
                subject_iss=subject_iss,
                subject_sub=subject_sub,
                status=status,
                health=health,
                cursor=cursor,
                limit=limit,
            )

    @get("/{connection_id:str}", operation_id="adminGetConnection", summary="One connection (never its tokens)")
    async def show(
        self, request: Request[Any, Any, Any], services: AdminDeps, connection_id: str
    ) -> connections.ConnectionView:
        return await in_unit(services, connections.show_connection, connection_id)

    @post(
        "/{connection_id:str}/revoke",
        operation_id="adminRevokeConnection",
        status_code=200,
        opt=OPERATOR,
        summary="Revoke at the provider (RFC 7009) when it can, and here always",
    )
    async def revoke(
        self, request: Request[Any, Any, Any], services: AdminDeps, connection_id: str
    ) -> connections.ConnectionRevoked:
        return await connections.revoke_connection(services.connections, connection_id)

    @post(
        "/{connection_id:str}/refresh",
        operation_id="adminRefreshConnection",
        status_code=200,
        opt=OPERATOR,
        summary="Refresh the access token now, under the same row lock as the token endpoint",
    )
    async def refresh(
        self, request: Request[Any, Any, Any], services: AdminDeps, connection_id: str
    ) -> connections.ConnectionView:
        return await connections.refresh_connection(services.connections, connection_id)

    @post(
        "/{connection_id:str}/reconnect-link",
        operation_id="adminReconnectLink",
        status_code=200,
        opt=OPERATOR,
        summary="A link to send the person: their connection's reconnect page (their own sign-in still required)",
    )
    async def reconnect_link(
        self, request: Request[Any, Any, Any], services: AdminDeps, connection_id: str
    ) -> reconnect_links.ReconnectLink:
        return await reconnect_links.reconnect_link(services.read_sessions, services.flows, connection_id)


class AdminPaymentsController(Controller):
    path = "/payments"
    tags = ["admin: payments"]

    @get("/", operation_id="adminListPayments", summary="Payments, newest first, by status and provider")
    async def list_payments(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        status: str | None = None,
        provider: str | None = None,
        cursor: str | None = None,
        limit: Limit = 50,
    ) -> payments.PaymentPage:
        return await in_unit(
            services, payments.list_payments, status=status, provider=provider, cursor=cursor, limit=limit
        )

    @get("/{flow_id:str}", operation_id="adminGetPayment", summary="One payment with the provider events received")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str) -> payments.PaymentDetail:
        return await in_unit(services, payments.show_payment, flow_id)

    @post(
        "/{flow_id:str}/reconcile",
        operation_id="adminReconcilePayment",
        status_code=200,
        opt=OPERATOR,
        summary="Ask the payment provider about this checkout now and apply its answer",
    )
    async def reconcile(
        self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str
    ) -> payments.Reconciled:
        return await payments.reconcile_payment(services, flow_id)


DIRECTORY_CONTROLLERS = [
    AdminProvidersController,
    AdminIssuersController,
    AdminConnectionsController,
    AdminPaymentsController,
]
