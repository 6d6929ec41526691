"""The MCP-server API (``/v1/flows``): thin handlers over ``FlowService``."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Annotated, Any, cast

from litestar import Controller, Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import Body, Parameter
from litestar.response.base import ASGIResponse

from service.admission import parked
from service.flows.deps import FlowApiDeps
from service.flows.longpoll import Answer, Parked
from service.flows.repository import FlowFields, Transition
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
from service.observability.requests import defer
from service.problems import problem_responses, response_for
from service.responses import JsonResponse

if TYPE_CHECKING:
    from litestar.background_tasks import BackgroundTask, BackgroundTasks
    from litestar.datastructures import Cookie
    from litestar.enums import MediaType
    from litestar.types import ASGIApp, Receive, Scope, Send, TypeEncodersMap


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


class LongPollAnswer(ASGIResponse):
    """The ASGI answer to a parked long-poll (a status read or a resolve): waits, then answers as
    the handler would have.

    Litestar calls it from its route (``HTTPRoute.handle``) once the handler has returned, and it
    hands itself to the request observer (``service.observability.requests.defer``), which waits
    once Litestar's router and exception handling have returned too: what a parked request holds
    is the server's and the observer's frames, this object and the wait's frames (1.3 KB less than
    waiting in the route). The answer is made by the route handler's own response path from the
    ``StatusResponse`` or ``ResolveResponse``, exactly as if the handler had returned it: same status, headers and
    body; an error raised by the wait (the flow gone, the database unreachable) gets the
    response the application's exception handlers give it (``service.problems.response_for``).

    Only ``__call__`` of ``ASGIResponse`` is used: Litestar calls nothing else on a response.
    """

    __slots__ = ("_parked", "_request")

    def __init__(self, parked: Parked[Any], request: Request[Any, Any, Any]) -> None:
        self._parked = parked
        self._request = request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        defer(scope, self)

    def wait(self) -> Coroutine[Any, Any, FlowFields | None]:
        parked(self._request.scope)  # waiting is not work: the bound on requests in progress frees its slot
        return self._parked.wait()

    def close(self) -> None:
        self._parked.close()

    async def answer(self, outcome: FlowFields | Exception | None, scope: Scope, receive: Receive, send: Send) -> None:
        response = self._failed(outcome) if isinstance(outcome, Exception) else await self._answered(outcome)
        await response(scope, receive, send)

    async def _answered(self, flow: FlowFields | None) -> ASGIApp:
        request = self._request
        try:
            data = self._parked.answer(flow)
            return await request.route_handler.to_response(app=request.app, data=data, request=request)
        except Exception as failed:  # every error gets the application's own answer
            return self._failed(failed)

    def _failed(self, failed: Exception) -> ASGIApp:
        return self.failed(self._request, failed)

    @staticmethod
    def failed(request: Request[Any, Any, Any], failed: Exception) -> ASGIApp:
        """The answer the request's route gives ``failed``, as its exception handling would."""
        return response_for(request, failed).to_asgi_response(
            app=None, request=request, type_encoders=request.route_handler.resolve_type_encoders()
        )


class _ParkLongPoll(Response[None]):
    """What the status handler returns for a long-poll that must wait: Litestar turns a returned
    ``Response`` into its ASGI answer with ``to_asgi_response``, which here is the waiting one."""

    def __init__(self, parked: Parked[Any]) -> None:
        super().__init__(None)
        self._parked = parked

    def to_asgi_response(
        self,
        app: Any,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        return LongPollAnswer(self._parked, request)


def _or_parked(answer: Answer | Parked[Answer]) -> Answer:
    """A handler's answer, or for a long-poll that must wait the response that waits for it. The
    declared type (the schema, and the response path the answer takes once the wait ends) stays
    the answer's; Litestar recognizes the returned ``Response`` at runtime."""
    if isinstance(answer, Parked):
        return cast("Answer", _ParkLongPoll(answer))
    return answer


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
        services: FlowApiDeps,
        client: AuthenticatedClient,
        data: Annotated[CreateFlowRequest, Body(examples=[_CREATE_EXAMPLE])],
        subject_token: SubjectTokenHeader = None,
    ) -> Response[CreateFlowResponse]:
        await services.subjects.prove(client, iss=data.subject.iss, sub=data.subject.sub, token=subject_token)
        created, response = await services.flows.create(client, data)
        return JsonResponse(response, status_code=201 if created else 200)

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
        services: FlowApiDeps,
        client: AuthenticatedClient,
        data: Annotated[ResolveRequest, Body(examples=[_RESOLVE_EXAMPLE])],
        subject_token: SubjectTokenHeader = None,
    ) -> ResolveResponse:
        await services.subjects.prove(client, iss=data.subject.iss, sub=data.subject.sub, token=subject_token)
        return _or_parked(await services.flows.resolve(client, data))

    @get(
        "/{flow_id:str}",
        operation_id="getFlow",
        summary="Status of a flow, optionally waiting for it to finish",
        description="A server client with `subject_proof = required` reads the flow's subject, `url` and "
        "`result` only with the flow's user's token in `Elicitd-Subject-Token`; without one, the flow's id, "
        "kind, status, times and error. Another user's token, or one that proves nothing, is refused (403).",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def status(
        self,
        services: FlowApiDeps,
        client: AuthenticatedClient,
        flow_id: str,
        wait_seconds: Annotated[
            float, Parameter(ge=0, le=300, default=0, description="Long-poll up to this many seconds")
        ] = 0,
        subject_token: SubjectTokenHeader = None,
    ) -> StatusResponse:
        return _or_parked(await services.flows.status(client, flow_id, wait_seconds, subject_token))

    @post(
        "/{flow_id:str}/complete",
        operation_id="completeExternalFlow",
        status_code=200,
        responses=problem_responses(400, 401, 404, 409, 413),
        summary="Complete an `external` flow with the caller's result",
    )
    async def complete(
        self, services: FlowApiDeps, client: AuthenticatedClient, flow_id: str, data: CompleteRequest
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
        self, services: FlowApiDeps, client: AuthenticatedClient, flow_id: str, data: FailRequest
    ) -> StatusResponse:
        change = Transition(FlowStatus.FAILED, Actor.API, error_code=data.code, error_message=data.message)
        return await services.flows.finish_external(client, flow_id, change)
