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
    from collections.abc import Iterable

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
