"""Admin API over the other domains' tables: providers, issuers, connections and payments.

Thin handlers over ``service.admin.directory``, ``.connections`` and ``.payments``, which the
CLI runs too. Views name safe columns one by one (never a token or a client secret, only whether
one is set). Changing a provider or issuer drops this process's cached discovery metadata.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get, patch, post
from litestar.params import Parameter

from service.admin import connections, directory, payments
from service.admin.deps import AdminDeps, unit
from service.admin.directory import (
    CreateIssuer,
    CreateProvider,
    DiscoveryReport,
    IssuerView,
    ProviderView,
    UpdateIssuer,
    UpdateProvider,
)
from service.admin.tokens import Role
from service.connections import providers
from service.errors import IssuerNotFound, ProviderNotFound
from service.identity import issuers

OPERATOR = {"role": Role.OPERATOR}
ADMIN = {"role": Role.ADMIN}
Limit = Annotated[int, Parameter(ge=1, le=500, default=50, description="Page size")]


class IssuerRef(msgspec.Struct, forbid_unknown_fields=True):
    issuer: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


def _forget_providers(services: AdminDeps) -> None:
    services.connections.metadata.forget()


class AdminProvidersController(Controller):
    path = "/providers"
    tags = ["admin: providers"]

    @get("/", operation_id="adminListProviders", summary="Third-party OAuth providers (never their secrets)")
    async def list_providers(self, request: Request[Any, Any, Any], services: AdminDeps) -> list[ProviderView]:
        async with unit(services) as session:
            return [directory.provider_view(p) for p in await providers.list_providers(session)]

    @post(
        "/",
        operation_id="adminCreateProvider",
        status_code=201,
        opt=ADMIN,
        summary="Create a provider from a catalog entry; the client secret is write-only (409 if the name exists)",
    )
    async def create(self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateProvider) -> ProviderView:
        async with unit(services) as session:
            view = await directory.create_provider(session, services.vault, data)
        _forget_providers(services)
        return view

    @get("/{name:str}", operation_id="adminGetProvider", summary="One provider (never its secret)")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        async with unit(services) as session:
            return directory.provider_view(await directory.get_provider(session, name))

    @patch(
        "/{name:str}",
        operation_id="adminUpdateProvider",
        opt=ADMIN,
        summary="Change fields of a provider; a secret not given is kept",
    )
    async def update(
        self, request: Request[Any, Any, Any], services: AdminDeps, name: str, data: UpdateProvider
    ) -> ProviderView:
        async with unit(services) as session:
            view = await directory.update_provider(session, services.vault, name, data)
        _forget_providers(services)
        return view

    @post(
        "/{name:str}/disable",
        operation_id="adminDisableProvider",
        status_code=200,
        opt=ADMIN,
        summary="Disable a provider: no new connect flows",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        return await _set_provider(request, services, name, False)

    @post(
        "/{name:str}/enable",
        operation_id="adminEnableProvider",
        status_code=200,
        opt=ADMIN,
        summary="Enable a provider",
    )
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> ProviderView:
        return await _set_provider(request, services, name, True)

    @post(
        "/{name:str}/test-discovery",
        operation_id="adminTestProviderDiscovery",
        status_code=200,
        opt=OPERATOR,
        summary="Fetch the provider's metadata now and show the endpoints a connect would use",
    )
    async def test_discovery(self, request: Request[Any, Any, Any], services: AdminDeps, name: str) -> DiscoveryReport:
        return await directory.check_provider_discovery(services.read_sessions, services.vault, services.http, name)


async def _set_provider(request: Request[Any, Any, Any], services: AdminDeps, name: str, enabled: bool) -> ProviderView:
    async with unit(services) as session:
        if not await providers.set_enabled(session, name, enabled):
            raise ProviderNotFound("No provider with this name.")
        return directory.provider_view(await directory.get_provider(session, name))


class AdminIssuersController(Controller):
    path = "/issuers"
    tags = ["admin: issuers"]

    @get("/", operation_id="adminListIssuers", summary="Trusted identity issuers (never their secrets)")
    async def list_issuers(self, request: Request[Any, Any, Any], services: AdminDeps) -> list[IssuerView]:
        async with unit(services) as session:
            return [directory.issuer_view(i) for i in await issuers.list_issuers(session)]

    @post(
        "/",
        operation_id="adminCreateIssuer",
        status_code=201,
        opt=ADMIN,
        summary="Trust an OIDC issuer; the client secret is write-only (409 if it is registered)",
    )
    async def create(self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateIssuer) -> IssuerView:
        async with unit(services) as session:
            view = await directory.create_issuer(session, services.vault, data)
        services.issuers.forget(view.issuer)
        return view

    @patch(
        "/",
        operation_id="adminUpdateIssuer",
        opt=ADMIN,
        summary="Change fields of the issuer named by `issuer`; a secret not given is kept",
    )
    async def update(self, request: Request[Any, Any, Any], services: AdminDeps, data: UpdateIssuer) -> IssuerView:
        async with unit(services) as session:
            view = await directory.update_issuer(session, services.vault, data)
        services.issuers.forget(view.issuer)
        return view

    @post(
        "/disable",
        operation_id="adminDisableIssuer",
        status_code=200,
        opt=ADMIN,
        summary="Disable an issuer (its browser sessions end at once)",
    )
    async def disable(self, request: Request[Any, Any, Any], services: AdminDeps, data: IssuerRef) -> dict[str, bool]:
        return await _set_issuer(request, services, data.issuer, False)

    @post("/enable", operation_id="adminEnableIssuer", status_code=200, opt=ADMIN, summary="Enable an issuer")
    async def enable(self, request: Request[Any, Any, Any], services: AdminDeps, data: IssuerRef) -> dict[str, bool]:
        return await _set_issuer(request, services, data.issuer, True)

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


async def _set_issuer(
    request: Request[Any, Any, Any], services: AdminDeps, issuer: str, enabled: bool
) -> dict[str, bool]:
    async with unit(services) as session:
        if not await issuers.set_enabled(session, issuer, enabled):
            raise IssuerNotFound("No issuer with this URL.")
    return {"enabled": enabled}


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
        async with unit(services) as session:
            return await connections.show_connection(session, connection_id)

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
        async with unit(services) as session:
            return await payments.list_payments(session, status=status, provider=provider, cursor=cursor, limit=limit)

    @get("/{flow_id:str}", operation_id="adminGetPayment", summary="One payment with the provider events received")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str) -> payments.PaymentDetail:
        async with unit(services) as session:
            return await payments.show_payment(session, flow_id)

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
