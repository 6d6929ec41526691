"""Request heads are bounded in the protocol (``service.request_head``): an oversized or unending
head is refused with 431/414 problem+json before it is kept, and costs the process no memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from urllib.parse import urlsplit

import psutil
import pytest

from service.limits import MAX_HEAD_BYTES, MAX_HEADER_COUNT, MAX_URL_BYTES
from tests.support.apps import RunningApp

MB = 1024 * 1024


async def exchange(app: RunningApp, head: bytes, *, body: bytes = b"", chunk: int = 64 * 1024) -> tuple[int, bytes]:
    """Send ``head`` (and ``body``) on a fresh connection in chunks, then read one answer: status and body."""
    parts = urlsplit(app.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    answer = asyncio.create_task(reader.read())  # read while sending: the refusal comes early
    payload = head + body
    try:
        for start in range(0, len(payload), chunk):
            writer.write(payload[start : start + chunk])
            await writer.drain()
    except ConnectionError:
        pass  # refused early and closed: the answer is already here
    try:
        raw = await asyncio.wait_for(answer, 10)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    status_line, _, rest = raw.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def request(path: str = "/healthz", headers: Sequence[tuple[str, str]] = ()) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_an_ordinary_request_passes(elicitd: RunningApp) -> None:
    status, _ = await exchange(elicitd, request(headers=[("X-Pad", "a" * (MAX_HEAD_BYTES - 1024))]))
    assert status == 200


async def test_a_header_of_eight_megabytes_is_431(elicitd: RunningApp) -> None:
    status, body = await exchange(elicitd, request(headers=[("X-Big", "a" * (8 * MB))]))
    assert status == 431
    problem = json.loads(body)
    assert problem["code"] == "headers_too_large"
    assert problem["status"] == 431


async def test_a_head_just_over_the_limit_is_431(elicitd: RunningApp) -> None:
    status, body = await exchange(elicitd, request(headers=[("X-Pad", "a" * MAX_HEAD_BYTES)]))
    assert status == 431
    assert json.loads(body)["code"] == "headers_too_large"


async def test_too_many_fields_are_431(elicitd: RunningApp) -> None:
    fine, _ = await exchange(elicitd, request(headers=[(f"X-H{i}", "v") for i in range(MAX_HEADER_COUNT - 3)]))
    over, body = await exchange(elicitd, request(headers=[(f"X-H{i}", "v") for i in range(MAX_HEADER_COUNT)]))
    assert fine == 200
    assert over == 431
    assert json.loads(body)["code"] == "headers_too_large"


async def test_a_long_url_is_414(elicitd: RunningApp) -> None:
    fine, _ = await exchange(elicitd, request("/healthz?pad=" + "a" * (MAX_URL_BYTES - 100)))
    status, body = await exchange(elicitd, request("/healthz?pad=" + "a" * MAX_URL_BYTES))
    endless, _ = await exchange(elicitd, b"GET /healthz?pad=" + b"a" * (4 * MB))
    assert fine == 200
    assert status == 414
    assert json.loads(body)["code"] == "uri_too_long"
    assert endless == 414


async def test_a_large_body_after_a_small_head_is_not_counted_as_head(elicitd: RunningApp) -> None:
    body = json.dumps({"pad": "a" * (MAX_HEAD_BYTES + MAX_HEAD_BYTES // 2)}).encode()
    head = (
        f"POST /v1/flows HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    status, _ = await exchange(elicitd, head, body=body, chunk=len(head) + len(body))
    assert status == 401  # read in full, then refused for want of an API key


async def test_the_second_request_on_a_connection_is_bounded_too(elicitd: RunningApp) -> None:
    first = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    status, rest = await exchange(elicitd, first + request(headers=[("X-Big", "a" * (2 * MB))]))
    assert status == 200  # the first answer; the refusal of the second follows it
    assert b"HTTP/1.1 431 Request Header Fields Too Large\r\n" in rest
    assert rest.endswith(b'"code": "headers_too_large", "detail": ' + json.dumps(_detail()).encode() + b"}")


def _detail() -> str:
    return f"The request head is larger than {MAX_HEAD_BYTES} bytes or has more than {MAX_HEADER_COUNT} fields."


@pytest.mark.slow
async def test_unfinished_huge_heads_cost_no_memory(elicitd: RunningApp) -> None:
    """Ten connections each send 16 MB of one header that never ends (no credentials needed)."""
    process = psutil.Process()
    before = process.memory_info().rss
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: " + b"a" * (16 * MB)
    answers = await asyncio.gather(*(exchange(elicitd, head) for _ in range(10)))
    grown = process.memory_info().rss - before
    assert [status for status, _ in answers] == [431] * 10
    assert grown < 20 * MB, f"RSS grew by {grown / MB:.0f} MB"
