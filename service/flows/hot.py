"""The two calls an MCP server makes on every retry, served without Litestar's per-request work.

``GET /v1/flows/{flow_id}`` (a status read, or a long-poll) and ``POST /v1/flows/resolve`` are the
hot path: every MCP client's retry of every tool call that asked for input is one of them. For a
handler with a body, two dependencies and a header parameter, Litestar routes the path, builds a
``Request``, runs the route's middleware, extracts each parameter and dependency into a dict
(``KwargsModel``), converts that dict into the handler's signature model and builds the answer
through ``to_response``: about a quarter of a resolve's CPU on the 2-core machine, more than the
database read it answers from (``bench/README.md``). ``HotFlowRoutes`` sits between the request
observer and Litestar and answers these two requests itself when they are ordinary, with the
same services, the same route handlers and the same answers:

* **What it takes.** ``POST /v1/flows/resolve`` whose body is non-empty JSON (``Content-Type``
  as ``service.limits`` requires it) that decodes strictly into ``ResolveRequest``, at most one
  ``Elicitd-Subject-Token`` header; ``GET /v1/flows/fl_…`` with no query or only
  ``wait_seconds=<decimal>`` from 0 to 300, and at most one ``Elicitd-Subject-Token``. The
  ``Host`` header is checked as Litestar's router checks it.
* **Everything else goes to Litestar** as it came, the body already read handed back through
  ``receive`` exactly as it arrived: a refused body, a malformed one, an unknown field, a query
  it does not know, a trailing slash, another method, a body over the limit. What is refused is
  refused by Litestar's own extraction and validation, so every error of the request's shape has
  the answer it always had (tests/flows/test_hot_routes.py compares both, byte for byte).
  Deciding costs no side effect: nothing is authenticated or read before the request is taken.
* **Errors after that** (the key, the subject proof, the flow, the database) get the response the
  route's exception handlers give them (``service.problems.response_for``, the route handler's own
  type encoders), and answers go through the route handler's ``to_response``: the status, headers
  and body Litestar would send. A long-poll that must wait is deferred to the observer exactly as
  the handler's is (``service.flows.api.LongPollAnswer``).
* **What Litestar would add around these routes** (guards, before/after hooks, a response cache,
  DTOs, exception hooks, CORS, per-route middleware beyond ``AllowHeaderMiddleware``, which only
  answers ``OPTIONS``) is checked once, when the application is built: if any of it is ever
  configured, building the application fails instead of serving without it.

``ELICITD_HOT_ROUTES=false`` leaves both routes to Litestar (docs/configuration.md).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from litestar._asgi.utils import is_valid_host  # the router's own check; pinned in constraints.txt
from litestar.handlers import HTTPRouteHandler
from litestar.utils.scope.state import ScopeState

from service.flows.api import FlowController, LongPollAnswer
from service.flows.longpoll import Parked
from service.flows.schemas import ResolveRequest
from service.identity.subject_proof import SUBJECT_TOKEN_HEADER
from service.limits import LimitedRequest, header_value, json_body_refusal
from service.observability.requests import defer
from service.responses import AllowHeaderMiddleware

if TYPE_CHECKING:
    from litestar import Litestar

    from service.flows.deps import HotFlowServices


ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

RESOLVE_PATH = "/v1/flows/resolve"
_STATUS_PREFIX = "/v1/flows/"
_FLOW_PREFIX = _STATUS_PREFIX + "fl_"
_PROBE_FLOW = "fl_0"
_WAIT = re.compile(rb"wait_seconds=([0-9]{1,3}(?:\.[0-9]{1,9})?)")
_MAX_WAIT = 300.0
_SUBJECT_TOKEN = SUBJECT_TOKEN_HEADER.lower().encode("latin-1")
_decode_resolve = msgspec.json.Decoder(ResolveRequest).decode


class HotFlowRoutes:
    """The ASGI layer under the request observer: answers an ordinary status read or resolve
    itself, hands everything else to ``app`` (Litestar's handler) unchanged."""

    __slots__ = ("_app", "_flows", "_limit", "_litestar", "_resolve", "_services", "_status")

    def __init__(self, app: ASGIApp, litestar: Litestar, services: HotFlowServices) -> None:
        self._app = app
        self._litestar = litestar
        self._services = services
        self._flows = services.flows
        self._resolve = _route(litestar, RESOLVE_PATH, "POST", {}, FlowController.resolve)
        # The body limit Litestar's request applies on this route (``LimitedRequest``).
        self._limit = self._resolve[0].resolve_request_max_body_size() or services.settings.max_body_bytes
        self._status = _route(
            litestar, _STATUS_PREFIX + _PROBE_FLOW, "GET", {"flow_id": _PROBE_FLOW}, FlowController.status
        )
        _check_app(litestar)

    def __call__(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        # Not a coroutine function: any other request gets the inner application's awaitable back,
        # so no frame of this layer stays alive under it.
        if scope["type"] == "http" and not scope.get("root_path"):
            path: str = scope["path"]
            method = scope["method"]
            if method == "POST" and path == RESOLVE_PATH:
                return self._resolve_call(scope, receive, send)
            if (
                method == "GET"
                and path.startswith(_FLOW_PREFIX)
                and path.find("/", len(_STATUS_PREFIX)) < 0
                and (wait := _wait_seconds(scope["query_string"])) is not None
                and _host_ok(scope)
                and _one_token_at_most(scope)
            ):
                return self._status_call(scope, receive, send, path[len(_STATUS_PREFIX) :], wait)
        return self._app(scope, receive, send)

    async def _status_call(self, scope: Any, receive: Any, send: Any, flow_ref: str, wait: float) -> None:
        handler, template = self._status
        scope["path_params"] = {"flow_id": flow_ref}
        request = self._routed(scope, receive, send, handler, template)
        try:
            client = await self._services.authenticator.authenticate(header_value(scope, b"authorization"))
            answer = await self._flows.status(client, flow_ref, wait, header_value(scope, _SUBJECT_TOKEN))
        except Exception as failed:  # every error gets the route's own answer
            await LongPollAnswer.failed(request, failed)(scope, receive, send)
            return
        await self._answer(handler, request, answer, scope, receive, send)

    async def _resolve_call(self, scope: Any, receive: Any, send: Any) -> None:
        arrived, body = await self._body(scope, receive)
        data = _resolve_request(scope, body) if body is not None and _host_ok(scope) else None
        if body is None or data is None:
            await self._app(scope, _replay(arrived, receive), send)
            return
        handler, template = self._resolve
        scope["path_params"] = {}
        ScopeState.from_scope(scope).body = body  # read, as Litestar's request leaves it
        request = self._routed(scope, receive, send, handler, template)
        try:
            services = self._services
            client = await services.authenticator.authenticate(header_value(scope, b"authorization"))
            subject = data.subject
            token = header_value(scope, _SUBJECT_TOKEN)
            await services.subjects.prove(client, iss=subject.iss, sub=subject.sub, token=token)
            answer = await self._flows.resolve(client, data)
        except Exception as failed:  # every error gets the route's own answer
            await LongPollAnswer.failed(request, failed)(scope, receive, send)
            return
        await self._answer(handler, request, answer, scope, receive, send)

    def _routed(self, scope: Any, receive: Any, send: Any, handler: HTTPRouteHandler, template: str) -> LimitedRequest:
        """The scope as Litestar's router leaves it for the route, and the request its handler
        would get (what the answer and the error responses are made with)."""
        scope["route_handler"] = handler
        scope["path_template"] = template
        return LimitedRequest(scope, receive, send)

    async def _answer(
        self, handler: HTTPRouteHandler, request: LimitedRequest, answer: Any, scope: Any, receive: Any, send: Any
    ) -> None:
        if isinstance(answer, Parked):
            defer(scope, LongPollAnswer(answer, request))
            return
        try:
            response = await handler.to_response(app=self._litestar, data=answer, request=request)
        except Exception as failed:
            response = LongPollAnswer.failed(request, failed)
        await response(scope, receive, send)

    async def _body(self, scope: Any, receive: Any) -> tuple[list[Any], bytes | None]:
        """The messages read and the whole body, or the body None when it is not one to take
        here (announced or grown over the limit, or the client gone): those messages then go to
        Litestar, which answers them as it always has."""
        announced = header_value(scope, b"content-length")
        if announced is not None and (not announced.isdigit() or int(announced) > self._limit):
            return [], None
        arrived: list[Any] = []
        size = 0
        while True:
            message = await receive()
            arrived.append(message)
            if message["type"] != "http.request":
                return arrived, None
            size += len(message.get("body", b""))
            if size > self._limit:
                return arrived, None
            if not message.get("more_body", False):
                break
        if len(arrived) == 1:
            return arrived, arrived[0].get("body", b"")
        return arrived, b"".join(m.get("body", b"") for m in arrived)


def _resolve_request(scope: Any, body: bytes) -> ResolveRequest | None:
    """The body as a ``ResolveRequest`` when Litestar would take it as the same one, else None.

    Strict decoding accepts less than Litestar's (it converts decoded JSON with ``strict=False``);
    whatever it accepts, Litestar accepts with the same values. The JSON rules of
    ``LimitedRequest.json`` (``json_body_refusal``) are the same; a body they refuse is Litestar's
    to refuse."""
    if not body or json_body_refusal(scope, body) is not None or not _one_token_at_most(scope):
        return None
    try:
        return _decode_resolve(body)
    except msgspec.DecodeError:  # malformed or invalid: Litestar's validation says which
        return None


def _wait_seconds(query: bytes) -> float | None:
    """``wait_seconds`` of a status read when the query is empty or names only it, as a decimal
    Litestar reads as the same float, within its bounds; else None (Litestar's to read)."""
    if not query:
        return 0.0
    match = _WAIT.fullmatch(query)
    if match is None:
        return None
    seconds = float(match.group(1))
    return seconds if seconds <= _MAX_WAIT else None


def _one_token_at_most(scope: Any) -> bool:
    """Two ``Elicitd-Subject-Token`` headers are Litestar's to read, as it reads them."""
    return sum(1 for name, _ in scope["headers"] if name == _SUBJECT_TOKEN) <= 1


def _host_ok(scope: Any) -> bool:
    for name, value in scope["headers"]:
        if name == b"host":
            return is_valid_host(value)
    return True


def _replay(arrived: list[Any], receive: Any) -> Any:
    """``receive`` that hands back what was already read, in order, then reads on."""
    pending = list(reversed(arrived))

    async def replay() -> Any:
        if pending:
            return pending.pop()
        return await receive()

    return replay


def _route(
    litestar: Litestar, path: str, method: str, params: dict[str, str], declared: HTTPRouteHandler
) -> tuple[HTTPRouteHandler, str]:
    """The route handler and path template Litestar's router gives ``method path``, checked to be
    ``declared``'s with nothing around it that this layer would skip."""
    _, handler, _, parsed, template = litestar.asgi_router.handle_routing(path=path, method=method)
    # A controller's handler calls its function bound to the controller instance.
    fn = getattr(handler, "fn", None)
    if not isinstance(handler, HTTPRouteHandler) or getattr(fn, "__func__", fn) is not declared.fn or parsed != params:
        raise RuntimeError(f"{method} {path} is not routed to {declared.handler_name}")
    checks = {
        "guards": handler.resolve_guards(),
        "before_request": handler.resolve_before_request(),
        "after_response": handler.resolve_after_response(),
        "cache": handler.cache,
        "data DTO": handler.resolve_data_dto(),
        "return DTO": handler.resolve_return_dto(),
        "middleware": [m for m in handler.resolve_middleware() if m is not AllowHeaderMiddleware],
    }
    found = [name for name, value in checks.items() if value]
    if found:
        raise RuntimeError(f"{method} {path} has {', '.join(found)}: HotFlowRoutes would skip it")
    return handler, template


def _check_app(litestar: Litestar) -> None:
    checks = {
        "after_exception": litestar.after_exception,
        "before_send": litestar.before_send,
        "cors_config": litestar.cors_config,
        "logging_config": litestar.logging_config,
        "pdb_on_exception": litestar.pdb_on_exception,
    }
    found = [name for name, value in checks.items() if value]
    if found:
        raise RuntimeError(f"the application has {', '.join(found)}: HotFlowRoutes would skip it")
