"""The admin API under ``/admin/v1``: thin handlers over ``service.admin.*`` operations.

Separate router, separate guard: an admin token (``Authorization: Bearer eat_…``), a least role
per route, and an audit row per call. The same operations back the ``elicitd admin`` CLI.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, Request, Router, get, post
from litestar.params import Parameter
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admin import deliveries, flows, subjects
from service.admin.api_audit import AUDIT_HANDLERS
from service.admin.api_brands import BRAND_CONTROLLERS
from service.admin.api_clients import AdminServerClientsController
from service.admin.api_directory import DIRECTORY_CONTROLLERS
from service.admin.api_endpoints import ENDPOINT_CONTROLLERS
from service.admin.api_grants import GRANT_CONTROLLERS
from service.admin.bodies import strict_booleans
from service.admin.deps import OPERATOR, AdminDeps, in_unit, unit
from service.admin.guards import AdminAuditMiddleware, AdminGuard, principal_of
from service.admin.schemas import (
    AdminFlow,
    FlowDetail,
    FlowPage,
    ReplayResult,
    Stats,
    WebhookDeliveryView,
    WebhookPage,
)
from service.admin.tokens import ADMIN_TOKEN_ID
from service.admin.views import flow_view
from service.flows.states import FlowStatus

Limit = Annotated[int, Parameter(ge=1, le=500, default=50, description="Page size")]
Cursor = Annotated[str | None, Parameter(description="`next_cursor` from the previous page")]


class AdminFlowsController(Controller):
    path = "/flows"
    tags = ["admin: flows"]

    @get("/", operation_id="adminListFlows", summary="List flows, newest first, with filters and a cursor")
    async def list_flows(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        status: str | None = None,
        kind: str | None = None,
        server_client: str | None = None,
        provider: str | None = None,
        subject_iss: str | None = None,
        subject_sub: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        expires_after: datetime | None = None,
        expires_before: datetime | None = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> FlowPage:
        filters = flows.FlowFilters(
            status=status,
            kind=kind,
            server_client=server_client,
            provider=provider,
            subject_iss=subject_iss,
            subject_sub=subject_sub,
            created_after=created_after,
            created_before=created_before,
            expires_after=expires_after,
            expires_before=expires_before,
        )
        return await in_unit(services, flows.list_flows, filters, cursor=cursor, limit=limit)

    @get("/{flow_id:str}", operation_id="adminGetFlow", summary="One flow with its full event history")
    async def show_flow(self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str) -> FlowDetail:
        async with unit(services) as session:
            return await flows.show_flow(services.flows, session, flow_id)

    @post(
        "/{flow_id:str}/cancel",
        operation_id="adminCancelFlow",
        status_code=200,
        opt=OPERATOR,
        summary="Cancel a pending flow (409 flow_not_pending when it already finished)",
    )
    async def cancel_flow(self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str) -> AdminFlow:
        token = ADMIN_TOKEN_ID.format(principal_of(request).token_id)
        return flow_view(await flows.finish_flow(services.flows, flow_id, FlowStatus.CANCELLED, admin_token=token))

    @post(
        "/{flow_id:str}/expire",
        operation_id="adminExpireFlow",
        status_code=200,
        opt=OPERATOR,
        summary="Expire a pending flow now",
    )
    async def expire_flow(self, request: Request[Any, Any, Any], services: AdminDeps, flow_id: str) -> AdminFlow:
        token = ADMIN_TOKEN_ID.format(principal_of(request).token_id)
        return flow_view(await flows.finish_flow(services.flows, flow_id, FlowStatus.EXPIRED, admin_token=token))


class AdminWebhooksController(Controller):
    path = "/webhooks"
    tags = ["admin: webhooks"]

    @get("/", operation_id="adminListWebhookDeliveries", summary="Completion-webhook deliveries, newest first")
    async def list_deliveries(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        delivery_state: Annotated[str | None, Parameter(query="state")] = None,
        server_client: str | None = None,
        flow_id: str | None = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> WebhookPage:
        async with unit(services) as session:
            return await deliveries.list_deliveries(
                session, state=delivery_state, server_client=server_client, flow=flow_id, cursor=cursor, limit=limit
            )

    @get("/{delivery_id:str}", operation_id="adminGetWebhookDelivery", summary="One webhook delivery")
    async def show_delivery(
        self, request: Request[Any, Any, Any], services: AdminDeps, delivery_id: str
    ) -> WebhookDeliveryView:
        return await in_unit(services, deliveries.show_delivery, delivery_id)

    @post(
        "/{delivery_id:str}/replay",
        operation_id="adminReplayWebhookDelivery",
        status_code=200,
        opt=OPERATOR,
        summary="Deliver an event again (after delivery or abandonment), with a fresh retry window",
    )
    async def replay(self, request: Request[Any, Any, Any], services: AdminDeps, delivery_id: str) -> ReplayResult:
        view = await in_unit(services, deliveries.replay, delivery_id)
        services.webhooks.wake()
        return ReplayResult(delivery=view)


@get(
    "/stats",
    operation_id="adminStats",
    tags=["admin: stats"],
    summary="Counts by status and kind; completion rate and median time-to-complete per provider",
)
async def admin_stats(
    request: Request[Any, Any, Any],
    services: AdminDeps,
    window: Annotated[str, Parameter(default="24h", description="e.g. 1h, 24h, 7d")] = "24h",
    server_client: Annotated[
        str | None, Parameter(description="Only this server client's flows and webhook backlog (sc_…)")
    ] = None,
) -> Stats:
    return await in_unit(services, flows.stats, flows.parse_window(window), server_client=server_client)


@get(
    "/subjects",
    operation_id="adminGetSubject",
    tags=["admin: subjects"],
    summary="One subject: connections with health and grants, recent flows, consent receipts, and why a tool fails",
)
async def admin_subject(
    request: Request[Any, Any, Any],
    services: AdminDeps,
    iss: Annotated[str, Parameter(description="The subject's issuer")],
    sub: Annotated[str, Parameter(description="The subject's sub at that issuer")],
    server_client: Annotated[
        str | None, Parameter(description="Why this server client's calls fail (its name or sc_… id)")
    ] = None,
) -> subjects.SubjectOverview:
    return await in_unit(services, subjects.subject_overview, iss=iss, sub=sub, server_client=server_client)


@get("/whoami", operation_id="adminWhoAmI", tags=["admin: audit"], summary="The calling token's id and role")
async def admin_whoami(request: Request[Any, Any, Any]) -> dict[str, str]:
    principal = principal_of(request)
    return {
        "admin_token_id": ADMIN_TOKEN_ID.format(principal.token_id),
        "name": principal.name,
        "role": principal.role.label,
    }


def admin_router(sessions: async_sessionmaker[AsyncSession]) -> Router:
    return Router(
        path="/admin/v1",
        route_handlers=[
            AdminFlowsController,
            AdminServerClientsController,
            AdminWebhooksController,
            admin_stats,
            admin_subject,
            *AUDIT_HANDLERS,
            admin_whoami,
            *DIRECTORY_CONTROLLERS,
            *GRANT_CONTROLLERS,
            *ENDPOINT_CONTROLLERS,
            *BRAND_CONTROLLERS,
        ],
        guards=[AdminGuard(sessions)],
        before_request=strict_booleans,
        # A closure, not DefineMiddleware(kwargs): Litestar deep-copies kwargs, and the session factory
        # (with its engine) must stay the one shared object.
        middleware=[lambda app: AdminAuditMiddleware(app, sessions)],
        security=[{"adminToken": []}],
        include_in_schema=True,
    )
