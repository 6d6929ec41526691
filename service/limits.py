"""The limits every request meets before any handler sees it, in one place.

A request's head (request line and header fields) is bounded by the HTTP protocol elicitd serves
with (``service.request_head``); its body by ``ELICITD_MAX_BODY_BYTES``; the JSON inside it by the
rules here. Each refusal is a 4xx with a stable code and changes nothing:

| what | limit | answer |
| --- | --- | --- |
| request target (path and query) | ``MAX_URL_BYTES`` | ``414 uri_too_long`` |
| request head (line and fields) | ``MAX_HEAD_BYTES`` | ``431 headers_too_large`` |
| header fields | ``MAX_HEADER_COUNT`` | ``431 headers_too_large`` |
| JSON nesting of a body | ``MAX_JSON_DEPTH`` | ``400 json_too_deep`` |
| a free-form object (``context``, ``params``, ``content``) | ``MAX_OBJECT_BYTES`` | ``400 invalid_request`` |
| a completion ``result`` | ``MAX_RESULT_BYTES`` | ``400 invalid_request`` |
| ``Content-Type`` of a JSON body | ``application/json`` or ``*/*+json`` | ``415 unsupported_media_type`` |

Why a depth limit: msgspec and the standard library both decode nested JSON recursively, so a
2 KB body nested a thousand deep ran out of Python's stack (``RecursionError``, a 500) before any
validation could speak. The depth is counted on the raw bytes, before decoding, in C-speed
passes (strings removed by one regular expression, brackets kept by ``bytes.translate``).
"""

from __future__ import annotations

import math
import re
from itertools import accumulate
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import InternalServerException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import Empty

from service.errors import ElicitdError, InvalidRequest

MAX_URL_BYTES = 8 * 1024
MAX_HEAD_BYTES = 32 * 1024
MAX_HEADER_COUNT = 100
MAX_JSON_DEPTH = 32
MAX_OBJECT_BYTES = 16 * 1024
MAX_RESULT_BYTES = 32 * 1024

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"{}[]")
_STEP = [0] * 256
for _open in b"{[":
    _STEP[_open] = 1
for _close in b"}]":
    _STEP[_close] = -1


class JsonTooDeep(InvalidRequest):
    code = "json_too_deep"
    title = "JSON nested too deeply"

    def __init__(self) -> None:
        super().__init__(f"JSON may nest objects and arrays at most {MAX_JSON_DEPTH} levels deep.")


class UnsupportedMediaType(ElicitdError):
    code = "unsupported_media_type"
    status = 415
    title = "Unsupported media type"

    def __init__(self) -> None:
        super().__init__("This endpoint takes a JSON body: send it with Content-Type: application/json.")


def json_depth(raw: bytes, *, stop_after: int = MAX_JSON_DEPTH) -> int:
    """The deepest nesting of objects and arrays in ``raw`` (brackets inside strings do not count).

    Counting stops once ``stop_after`` is passed, so a hostile body costs no more than a valid one.
    For a body that is not valid JSON the figure is an upper bound; the decoder refuses it anyway.
    """
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    deepest = 0
    for depth in accumulate(map(_STEP.__getitem__, brackets)):
        if depth > deepest:
            deepest = depth
            if deepest > stop_after:
                break
    return deepest


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` or a structured ``+json`` type (``application/merge-patch+json`` …)."""
    media = content_type.strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def encoded_size(value: Any) -> int:
    return len(msgspec.json.encode(value))


def check_object_size(value: Any, field: str, limit: int = MAX_OBJECT_BYTES) -> None:
    """For a struct's ``__post_init__``: msgspec turns the ``ValueError`` into a 400 naming ``field``."""
    if value and encoded_size(value) > limit:
        raise ValueError(f"`{field}` is larger than {limit} bytes once encoded as JSON")


def header_value(scope: Any, name: bytes) -> str | None:
    """The first value of a header, read from the ASGI scope (names are lower case there).

    Litestar's ``request.headers`` builds ``Headers``: every header decoded into a case-insensitive
    multidict (~8 µs here, and ~2 KB that a parked long-poll would hold) to read one of them."""
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


class LimitedRequest(Request[Any, Any, Any]):
    """Litestar's request with the JSON rules applied before a body is decoded.

    The body and its ``Content-Type`` are read from the ASGI scope and ``receive`` directly, with
    Litestar's limit on the body (``request_max_body_size``, announced or streamed: 413). Litestar's
    own path builds ``Headers`` (every header decoded into a case-insensitive multidict) for the
    ``Content-Length``, parses the ``Content-Type`` with its parameters and streams the body
    through an async generator: reading and checking resolve's body took 16 to 33 µs that way and
    8 to 16 µs this way (the same request object, alternating, on the 2-core machine).
    """

    __slots__ = ()

    async def body(self) -> bytes:
        if self._body is Empty:
            state = self._connection_state
            if state.body is Empty:
                state.body = await self._read_body()
            self._body = state.body
        return self._body

    async def _read_body(self) -> bytes:
        if not self.is_connected:
            raise InternalServerException("stream consumed")
        limit = self.route_handler.resolve_request_max_body_size() or math.inf
        announced = header_value(self.scope, b"content-length")
        # The HTTP parser refuses a Content-Length that is not a number before any app runs.
        if announced is not None and announced.isdigit() and int(announced) > limit:
            raise RequestEntityTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self.receive()
            if event["type"] == "http.disconnect":
                raise InternalServerException("client disconnected prematurely")
            if event["type"] == "http.request":
                chunk = event.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise RequestEntityTooLarge
                chunks.append(chunk)
                if not event.get("more_body", False):
                    break
        self.is_connected = False
        return b"".join(chunks)

    async def json(self) -> Any:
        body = await self.body()
        if body and (refused := json_body_refusal(self.scope, body)) is not None:
            raise refused
        return await super().json()


def json_body_refusal(scope: Any, body: bytes) -> ElicitdError | None:
    """Why a non-empty body may not be decoded as JSON (its ``Content-Type``, its nesting), or None.

    ``LimitedRequest.json`` raises it; ``service.flows.hot`` leaves such a body to Litestar."""
    media_type = (header_value(scope, b"content-type") or "").partition(";")[0]
    if not is_json_media_type(media_type):
        return UnsupportedMediaType()
    # Nesting needs an opening bracket per level: a body with few brackets (every body the API
    # expects) cannot be too deep, and skips the scan (~2% of a resolve's CPU).
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH and json_depth(body) > MAX_JSON_DEPTH:
        return JsonTooDeep()
    return None
