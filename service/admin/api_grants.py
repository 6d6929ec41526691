"""Admin API for grants and trust groups (``/admin/v1/grants``, ``/admin/v1/trust-groups``).

Thin handlers over ``service.grants.operators`` and ``service.grants.groups``, which the CLI runs
too. Giving a grant hands a connection to a server client, so it needs the ``admin`` role, and its
route names both the connection and the grantee so the audit row records who got what; revoking
needs ``operator``; reading needs ``viewer``.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, patch, post, put
from litestar.params import Parameter

from service.admin.deps import ADMIN, OPERATOR, AdminDeps, in_unit, unit
from service.grants import operators
from service.grants.operators import (
    CreateTrustGroup,
    GiveGrant,
    GrantPage,
    GrantView,
    TrustGroupView,
    UpdateTrustGroup,
)

Limit = Annotated[int, Parameter(ge=1, le=500, default=50, description="Page size")]


class AdminGrantsController(Controller):
    path = "/grants"
    tags = ["admin: grants"]

    @get("/", operation_id="adminListGrants", summary="Grants, oldest first, by connection, server client or group")
    async def list_grants(
        self,
        request: Request[Any, Any, Any],
        services: AdminDeps,
        connection_id: str | None = None,
        server_client: Annotated[str | None, Parameter(description="sc_… id or name")] = None,
        trust_group: Annotated[str | None, Parameter(description="tg_… id or name")] = None,
        live: Annotated[bool, Parameter(description="only grants not revoked")] = False,
        cursor: str | None = None,
        limit: Limit = 50,
    ) -> GrantPage:
        async with unit(services) as session:
            return await operators.list_grants(
                session,
                connection=connection_id,
                server_client=server_client,
                trust_group=trust_group,
                live=live,
                cursor=cursor,
                limit=limit,
            )

    @get("/{grant_id:str}", operation_id="adminGetGrant", summary="One grant")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, grant_id: str) -> GrantView:
        return await in_unit(services, operators.show_grant, grant_id)

    @post(
        "/{grant_id:str}/revoke",
        operation_id="adminRevokeGrant",
        status_code=200,
        opt=OPERATOR,
        summary="Revoke a grant: the grantee's next token request is answered as if there were no connection",
    )
    async def revoke(self, request: Request[Any, Any, Any], services: AdminDeps, grant_id: str) -> GrantView:
        return await in_unit(services, operators.revoke_grant, grant_id)


class AdminConnectionGrantsController(Controller):
    path = "/connections/{connection_id:str}/grants"
    tags = ["admin: grants"]

    @put(
        "/{grantee:str}",
        operation_id="adminGiveGrant",
        opt=ADMIN,
        summary="Let a server client (sc_… or name) or a trust group (tg_…) use a connection for some scopes",
        description="The grant points at the connection's authorization that holds exactly these scopes "
        "(409 `no_matching_authorization` when none does: a grant never hands out more than it names); it "
        "replaces the grantee's live grant when it has one. The audit row names the connection and the grantee.",
    )
    async def give(
        self, request: Request[Any, Any, Any], services: AdminDeps, connection_id: str, grantee: str, data: GiveGrant
    ) -> GrantView:
        return await in_unit(services, operators.give_grant, services.vault, connection_id, grantee, list(data.scopes))


class AdminTrustGroupsController(Controller):
    path = "/trust-groups"
    tags = ["admin: trust groups"]

    @get("/", operation_id="adminListTrustGroups", summary="Trust groups and their members")
    async def list_groups(self, request: Request[Any, Any, Any], services: AdminDeps) -> list[TrustGroupView]:
        return await in_unit(services, operators.list_trust_groups)

    @post(
        "/",
        operation_id="adminCreateTrustGroup",
        status_code=201,
        opt=ADMIN,
        summary="Declare server clients one party: grants then go to the group and pages name every member",
        description="A member without subject proof (its API key alone names any user, so it would read every "
        "grant of the group) is refused with 409 `unproven_member` unless `allow_unproven` is true; a group "
        "that allows them says so in `allow_unproven` and `warnings`.",
    )
    async def create(
        self, request: Request[Any, Any, Any], services: AdminDeps, data: CreateTrustGroup
    ) -> TrustGroupView:
        return await in_unit(services, operators.create_trust_group, data)

    @get("/{group:str}", operation_id="adminGetTrustGroup", summary="One trust group (tg_… id or name)")
    async def show(self, request: Request[Any, Any, Any], services: AdminDeps, group: str) -> TrustGroupView:
        return await in_unit(services, operators.show_trust_group, group)

    @patch(
        "/{group:str}",
        operation_id="adminUpdateTrustGroup",
        opt=ADMIN,
        summary="Change the display name, the complete member list or whether unproven members are allowed",
        description="`allow_unproven: false` is refused with 409 `unproven_member` while a member without "
        "subject proof remains (after the member list of the same call is applied).",
    )
    async def update(
        self, request: Request[Any, Any, Any], services: AdminDeps, group: str, data: UpdateTrustGroup
    ) -> TrustGroupView:
        return await in_unit(services, operators.update_trust_group, group, data)

    @delete(
        "/{group:str}",
        operation_id="adminDeleteTrustGroup",
        status_code=200,
        opt=ADMIN,
        summary="Delete a trust group; its grants end with it",
    )
    async def remove(self, request: Request[Any, Any, Any], services: AdminDeps, group: str) -> TrustGroupView:
        return await in_unit(services, operators.delete_trust_group, group)


GRANT_CONTROLLERS = [AdminGrantsController, AdminConnectionGrantsController, AdminTrustGroupsController]
