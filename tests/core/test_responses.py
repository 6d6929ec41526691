"""``JsonResponse`` answers plain JSON with exactly the messages Litestar's own response sends,
and leaves every other answer to Litestar."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import msgspec
import pytest
from litestar import Response
from litestar.datastructures import Cookie
from litestar.response.base import ASGIResponse

from service.responses import JsonAnswer, JsonResponse


class _View(msgspec.Struct):
    id: uuid.UUID
    at: datetime.datetime
    note: str


class _Answer(msgspec.Struct, omit_defaults=True):
    flow: _View
    result: dict[str, Any] | None = None


CONTENT = _Answer(
    _View(uuid.UUID(int=7), datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC), "é \u2028 <x>"), {"ok": True}
)


async def _messages(answer: ASGIResponse) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        raise AssertionError("an answer never reads")

    await answer({"type": "http"}, receive, send)  # type: ignore[arg-type]
    return sent


def _asgi(response: Response[Any], **kwargs: Any) -> ASGIResponse:
    return response.to_asgi_response(None, None, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [200, 201])
async def test_plain_json_is_sent_as_litestar_sends_it(status: int) -> None:
    kwargs: dict[str, Any] = {"headers": {}, "cookies": frozenset(), "media_type": "application/json"}
    ours = _asgi(JsonResponse(CONTENT, status_code=status), **kwargs)
    theirs = _asgi(Response(CONTENT, status_code=status), **kwargs)
    assert type(ours) is JsonAnswer
    assert await _messages(ours) == await _messages(theirs)
    assert (await _messages(ours))[0]["headers"] == [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(msgspec.json.encode(CONTENT))).encode()),
    ]


@pytest.mark.parametrize(
    ("response", "kwargs"),
    [
        (JsonResponse(CONTENT, headers={"Cache-Control": "no-store"}), {}),
        (JsonResponse(CONTENT), {"headers": {"X-Route": "1"}}),
        (JsonResponse(CONTENT, cookies=[Cookie(key="k", value="v")]), {}),
        (JsonResponse(CONTENT), {"cookies": [Cookie(key="k", value="v")]}),
        (JsonResponse("text", media_type="text/plain"), {}),
        (JsonResponse(None, status_code=204), {}),
        (JsonResponse(CONTENT, status_code=404), {}),
        (JsonResponse(None), {"is_head_response": True}),
    ],
)
async def test_anything_else_takes_litestars_path(response: JsonResponse[Any], kwargs: dict[str, Any]) -> None:
    ours = _asgi(response, **kwargs)
    assert type(ours) is ASGIResponse
    plain = Response(
        response.content,
        status_code=response.status_code,
        headers=response.headers,
        cookies=response.cookies,
        media_type=response.media_type,
    )
    assert await _messages(ours) == await _messages(_asgi(plain, **kwargs))
