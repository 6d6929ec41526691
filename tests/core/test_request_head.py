"""Request heads are bounded in the protocol (``service.request_head``): an oversized or unending
head is refused with 431/414 problem+json before it is kept, and costs the process no memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.server import ServerState

from service.limits import MAX_HEAD_BYTES, MAX_HEADER_COUNT, MAX_URL_BYTES
from service.request_head import BoundedHttpToolsProtocol, _OneWrite
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


# ---- the response in one write ---------------------------------------------------------------------
class _Recorder(asyncio.Transport):
    """A transport that keeps what is written to it, for uvicorn's own request cycle to write to."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(method: str = "GET", *, expect_100_continue: bool = False) -> tuple[Any, _Recorder]:
    """uvicorn's ``RequestResponseCycle`` writing through ``_OneWrite`` to a recorder, as
    ``BoundedHttpToolsProtocol`` sets it up."""
    recorder = _Recorder()
    scope = {"type": "http", "method": method, "path": "/", "headers": []}
    cycle = RequestResponseCycle(
        scope=scope,  # type: ignore[arg-type]
        transport=recorder,
        flow=FlowControl(recorder),
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=expect_100_continue,
        keep_alive=True,
        on_response=lambda: None,
    )
    cycle.transport = _OneWrite(cycle, recorder)  # type: ignore[assignment]
    return cycle, recorder


def _start(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http.response.start", "status": 200, "headers": headers}


HEAD_WITH_LENGTH = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n"


async def test_a_response_with_a_length_is_one_write() -> None:
    cycle, recorder = _cycle()
    await cycle.send(_start([(b"content-length", b"7")]))
    assert recorder.writes == []  # held for the body
    await cycle.send({"type": "http.response.body", "body": b'{"a":1}'})
    assert recorder.writes == [HEAD_WITH_LENGTH + b'{"a":1}']
    assert cycle.response_complete


async def test_a_body_in_parts_sends_the_head_with_the_first() -> None:
    cycle, recorder = _cycle()
    await cycle.send(_start([(b"content-length", b"7")]))
    await cycle.send({"type": "http.response.body", "body": b'{"a"', "more_body": True})
    await cycle.send({"type": "http.response.body", "body": b":1}"})
    assert recorder.writes == [HEAD_WITH_LENGTH + b'{"a"', b":1}"]


@pytest.mark.parametrize(
    ("method", "headers", "head"),
    [
        ("HEAD", [(b"content-length", b"7")], HEAD_WITH_LENGTH),
        ("GET", [(b"content-length", b"0")], b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
        (
            "GET",
            [(b"content-type", b"text/event-stream")],
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        ),
    ],
    ids=["head-request", "empty-body", "streamed"],
)
async def test_a_head_with_no_body_to_follow_goes_out_at_once(
    method: str, headers: list[tuple[bytes, bytes]], head: bytes
) -> None:
    cycle, recorder = _cycle(method)
    await cycle.send(_start(headers))
    assert recorder.writes == [head]


async def test_continue_goes_out_before_the_response() -> None:
    cycle, recorder = _cycle("POST", expect_100_continue=True)
    cycle.message_event.set()
    await cycle.receive()
    assert recorder.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_closing_writes_a_held_head_first() -> None:
    cycle, recorder = _cycle()
    await cycle.send(_start([(b"content-length", b"7")]))
    cycle.transport.close()
    assert (recorder.writes, recorder.closed) == ([HEAD_WITH_LENGTH], True)


async def test_the_protocol_answers_in_one_write() -> None:
    """``BoundedHttpToolsProtocol`` gives each request cycle the one-write transport."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(
        app, http=BoundedHttpToolsProtocol, lifespan="off", log_config=None, server_header=False, date_header=False
    )
    config.load()
    protocol = BoundedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    recorder = _Recorder()
    protocol.connection_made(recorder)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2)  # two, pipelined
    for _ in range(10):
        await asyncio.sleep(0)
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"] * 2
    protocol.connection_lost(None)


async def test_a_head_request_on_the_server_is_answered(elicitd: RunningApp) -> None:
    """The head announces a body that a HEAD answer never sends: it goes out on its own."""
    head = b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    parts = urlsplit(elicitd.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(head)
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")  # /healthz answers GET
    assert b"\r\ncontent-length: 172\r\n" in raw
    assert raw.endswith(b"\r\n\r\n")  # the head, and no body
