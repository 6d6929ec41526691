"""The MCP-server API (``/v1/flows``): thin handlers over ``FlowService``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from litestar import Controller, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import Body, Parameter

from service.errors import problem_responses
from service.flows.repository import Transition
from service.flows.schemas import (
    CompleteRequest,
    CreateFlowRequest,
    CreateFlowResponse,
    FailRequest,
    ResolveRequest,
    ResolveResponse,
    StatusResponse,
)
from service.flows.states import Actor, FlowStatus
from service.identity.deps import provide_server_client
from service.identity.keys import AuthenticatedClient
from service.identity.subject_proof import SubjectTokenHeader

if TYPE_CHECKING:
    from service.services import Services

_CREATE_EXAMPLE = Example(
    summary="Connect GitHub",
    value={
        "subject": {"iss": "https://id.example.com", "sub": "u-123"},
        "kind": "oauth_connect",
        "provider": "github",
        "scopes": ["repo"],
        "ttl_seconds": 900,
        "context": {"tool": "list_files"},
    },
)
_RESOLVE_EXAMPLE = Example(
    summary="Retry after the client accepted",
    value={
        "subject": {"iss": "https://id.example.com", "sub": "u-123"},
        "request_state": "v1.k1.…",
        "input_responses": {"elicitd_fl_0190…": {"action": "accept"}},
        "wait_seconds": 20,
    },
)


class FlowController(Controller):
    """Handlers take ``services`` (one dependency that ``client`` also depends on), not ``flows``:
    see ``service.identity.deps``."""

    path = "/v1/flows"
    tags = ["flows"]
    dependencies = {"client": provide_server_client}
    security = [{"apiKey": []}]

    @post(
        "/",
        operation_id="createFlow",
        summary="Create a flow or reuse the pending equivalent",
        responses={
            200: ResponseSpec(
                data_container=CreateFlowResponse,
                description="The reused pending flow, or `completed` when already satisfied",
            ),
            **problem_responses(400, 401, 403, 413, 429),
        },
        description="Answers 201 with a new flow, 200 with the reused pending flow or with `completed` when the "
        "request is already satisfied (an active connection covering the scopes). `mcp` is a "
        "ready 2026-07-28 InputRequiredResult; `legacy` is the 2025-11-25 equivalent.",
    )
    async def create(
        self,
        services: Services,
        client: AuthenticatedClient,
        data: Annotated[CreateFlowRequest, Body(examples=[_CREATE_EXAMPLE])],
        subject_token: SubjectTokenHeader = None,
    ) -> Response[CreateFlowResponse]:
        await services.subjects.prove(client, iss=data.subject.iss, sub=data.subject.sub, token=subject_token)
        created, response = await services.flows.create(client, data)
        return Response(response, status_code=201 if created else 200)

    @post(
        "/resolve",
        operation_id="resolveFlow",
        status_code=200,
        summary="Resolve an MCP client's retry",
        responses=problem_responses(400, 401, 403, 413),
        description="Unseals `request_state`, applies the client's action and, on `accept`, waits up to "
        "`wait_seconds` for the flow to finish.",
    )
    async def resolve(
        self,
        services: Services,
        client: AuthenticatedClient,
        data: Annotated[ResolveRequest, Body(examples=[_RESOLVE_EXAMPLE])],
        subject_token: SubjectTokenHeader = None,
    ) -> ResolveResponse:
        await services.subjects.prove(client, iss=data.subject.iss, sub=data.subject.sub, token=subject_token)
        return await services.flows.resolve(client, data)

    @get(
        "/{flow_id:str}",
        operation_id="getFlow",
        summary="Status of a flow, optionally waiting for it to finish",
        responses=problem_responses(400, 401, 404),
    )
    async def status(
        self,
        services: Services,
        client: AuthenticatedClient,
        flow_id: str,
        wait_seconds: Annotated[
            float, Parameter(ge=0, le=300, default=0, description="Long-poll up to this many seconds")
        ] = 0,
    ) -> StatusResponse:
        return await services.flows.status(client, flow_id, wait_seconds)

    @post(
        "/{flow_id:str}/complete",
        operation_id="completeExternalFlow",
        status_code=200,
        responses=problem_responses(400, 401, 404, 409, 413),
        summary="Complete an `external` flow with the caller's result",
    )
    async def complete(
        self, services: Services, client: AuthenticatedClient, flow_id: str, data: CompleteRequest
    ) -> StatusResponse:
        change = Transition(FlowStatus.COMPLETED, Actor.API, result=data.result)
        return await services.flows.finish_external(client, flow_id, change)

    @post(
        "/{flow_id:str}/fail",
        operation_id="failExternalFlow",
        status_code=200,
        responses=problem_responses(400, 401, 404, 409, 413),
        summary="Fail an `external` flow with a code the MCP server can act on",
    )
    async def fail(
        self, services: Services, client: AuthenticatedClient, flow_id: str, data: FailRequest
    ) -> StatusResponse:
        change = Transition(FlowStatus.FAILED, Actor.API, error_code=data.code, error_message=data.message)
        return await services.flows.finish_external(client, flow_id, change)
