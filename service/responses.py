"""The response class every route's returned data is answered with.

Litestar turns a handler's returned value into a ``Response``, then into an ``ASGIResponse``: a
case-insensitive header structure filled one header at a time, a cookie tuple, a deprecation
check, then the headers encoded again when the answer starts. For the hot path (a status read,
a resolve, a token) that was ~50 µs of a request's ~400 µs of CPU on the 2-core machine, for an
answer that is always the same two headers and a JSON body. ``JsonResponse`` renders the body
exactly as Litestar does (the same encoder and type encoders) and, when the answer is plain JSON
with nothing else to carry, answers with ``JsonAnswer``: the two messages and nothing more. Any
answer with cookies, headers, a background task, another media type or a status without a body
takes Litestar's own path unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from litestar import Response
from litestar.enums import MediaType
from litestar.response.base import ASGIResponse
from litestar.serialization import get_serializer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable

    from litestar.app import Litestar
    from litestar.background_tasks import BackgroundTask, BackgroundTasks
    from litestar.connection import Request
    from litestar.datastructures import Cookie
    from litestar.types import Receive, Scope, Send, TypeEncodersMap

T = TypeVar("T")

_JSON = MediaType.JSON.value
_CONTENT_TYPE = (b"content-type", _JSON.encode())


class JsonAnswer(ASGIResponse):
    """A JSON answer as the ASGI server gets it: status, ``Content-Type``, ``Content-Length``, body
    (the same messages, in the same order, as Litestar's ``ASGIResponse`` sends for it).

    Only ``__call__`` of ``ASGIResponse`` is used (Litestar calls nothing else on an answer), and
    only its ``status_code`` and ``body`` slots are set."""

    __slots__ = ()

    def __init__(self, status: int, body: bytes) -> None:  # no super().__init__: that is the cost
        self.status_code = status
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body
        await send(
            {
                "type": "http.response.start",
                "status": self.status_code,
                "headers": [_CONTENT_TYPE, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


class JsonResponse(Response[T]):
    """Litestar's ``Response``, answered by ``JsonAnswer`` when it is plain JSON."""

    def to_asgi_response(
        self,
        app: Litestar | None,
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
        status = self.status_code or status_code or 200
        plain = (
            not (self.background or background or self.cookies or cookies or self.headers or headers)
            and encoded_headers is None
            and not is_head_response
            and 200 <= status < 300
            and status != 204
            and (self.media_type or media_type or _JSON) == _JSON
        )
        if not plain:
            return super().to_asgi_response(
                app,
                request,
                background=background,
                cookies=cookies,
                encoded_headers=encoded_headers,
                headers=headers,
                is_head_response=is_head_response,
                media_type=media_type,
                status_code=status_code,
                type_encoders=type_encoders,
            )
        encoders = {**type_encoders, **self.response_type_encoders} if type_encoders else self.response_type_encoders
        return JsonAnswer(status, self.render(self.content, _JSON, get_serializer(encoders)))


# ---- OPTIONS ---------------------------------------------------------------------------------------
class AllowHeaderMiddleware:
    """Answers ``OPTIONS`` with every method of the path in ``Allow``.

    Litestar builds a path's automatic ``OPTIONS`` handler with the methods known when the path's
    first handler is registered; handlers added to the same path later (a controller's ``get``,
    ``post`` and ``patch`` on one path) are served but missing from ``Allow``. The methods are read
    from the application's routes, as they are once every route is registered."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._methods: dict[str, str] | None = None

    def __call__(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        # Not a coroutine function: for any other request it hands back the inner application's
        # awaitable, so no frame of this middleware stays alive under a parked long-poll (~0.4 KB).
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            inner: Awaitable[None] = self.app(scope, receive, send)
            return inner
        return self._options(scope, receive, send)

    async def _options(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_with_allow(message: Any) -> None:
            if message["type"] == "http.response.start":
                allowed = self._allowed(scope)
                if allowed is not None:
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                    message = {**message, "headers": [*headers, (b"allow", allowed.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_allow)

    def _allowed(self, scope: Any) -> str | None:
        if self._methods is None:
            routes = scope["litestar_app"].routes
            self._methods = {}
            for route in routes:
                if hasattr(route, "methods"):
                    allowed = ", ".join(sorted(route.methods))
                    self._methods[route.path] = self._methods[route.path_format] = allowed
        template = scope.get("path_template") or scope.get("path")
        return self._methods.get(template)
