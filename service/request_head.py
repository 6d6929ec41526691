"""uvicorn's httptools protocol with a bound on every request head.

httptools (llhttp) puts no limit on a request line or a header field: uvicorn keeps the URL it
has read so far, and httptools concatenates the pieces of an unfinished header value, copying it
again for every packet. Measured before this bound: one unfinished 16 MB header on each of ten
connections, sent without credentials, grew the process from 138 to 325 MB, and an 8 MB header
was answered 200. No ASGI middleware can help, because the application only sees a request once
its head is complete; so the bound lives here, in the protocol, before any of it is kept:

* the request target may hold ``MAX_URL_BYTES`` (``414 uri_too_long``);
* the head, request line and fields together, ``MAX_HEAD_BYTES``, in at most
  ``MAX_HEADER_COUNT`` fields (``431 headers_too_large``).

Bytes still arriving for an unfinished head are counted as they come, so a head that never ends
is refused once it passes the limit, whatever it holds. The answer is problem+json, and the
connection is closed after it. With the pure-Python h11 parser (the fallback when httptools is
not installed), h11's own ``max_incomplete_event_size`` bounds the head at the same size; h11
answers an oversized one with a plain 400.
"""

from __future__ import annotations

import asyncio
import http
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.errors import PROBLEM_BASE, PROBLEM_JSON
from service.limits import MAX_HEAD_BYTES, MAX_HEADER_COUNT, MAX_URL_BYTES

# How long a refused connection's further bytes are read and dropped before it is closed.
LINGER_SECONDS = 2.0

_REFUSALS = {
    414: ("uri_too_long", f"The request target is longer than {MAX_URL_BYTES} bytes."),
    431: (
        "headers_too_large",
        f"The request head is larger than {MAX_HEAD_BYTES} bytes or has more than {MAX_HEADER_COUNT} fields.",
    ),
}


def _refusal(status: int) -> bytes:
    code, detail = _REFUSALS[status]
    phrase = http.HTTPStatus(status).phrase
    body = json.dumps(
        {"type": PROBLEM_BASE + code, "title": phrase, "status": status, "code": code, "detail": detail}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        f"content-type: {PROBLEM_JSON}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# ``BoundedHttpToolsProtocol._head`` between the end of a request head and the end of its message.
_HEAD_DONE = -1


class _ListEvent(asyncio.Event):
    """``asyncio.Event`` with its waiters in a list: an Event's deque allocates a 64-slot block
    (~0.8 KB) up front, and uvicorn keeps two Events per connection that almost never have a
    waiter. Event only appends, removes and iterates them, which a list does as well."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters = []  # type: ignore[assignment]  # a list: the same operations, 56 bytes empty


class _Pipeline(list[Any]):
    """uvicorn's queue of pipelined requests, as a list (a deque allocates ~0.7 KB up front; the
    queue is empty on every connection but a pipelining client's). It only needs these two."""

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)


_NOT_YET = b"not yet"  # ``_OneWrite._head`` before the response head is written (compared by identity)


class _OneWrite:
    """The transport a request cycle writes its response to: a head announcing a body
    (``Content-Length`` > 0) waits for the body's first bytes and goes out with them, in one write.

    uvicorn writes the head and the body separately, and uvloop sends each at once: two ``send``
    calls and two TCP segments per response (TCP_NODELAY is on), where one would do. The head is
    held only when bytes are sure to follow: not for a ``HEAD`` request, an empty or chunked
    (streamed) body, whose head goes out at once as before. Nothing else changes: the bytes are
    the same, in the same order; a cycle that closes its transport first writes what it holds.
    The cycle is kept only until its head is written (it refers back to this object).
    """

    __slots__ = ("_cycle", "_head", "_transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._transport = transport
        self._head: bytes | None = _NOT_YET  # then the held head, or None once written

    def write(self, data: bytes) -> None:
        head = self._head
        if head is None:
            self._transport.write(data)
        elif head is not _NOT_YET:
            self._head = None
            self._transport.write(head + data)
        else:
            cycle = self._cycle
            if not cycle.response_started:  # ``100 Continue``, before the response
                self._transport.write(data)
                return
            self._cycle = None
            if (
                cycle.chunked_encoding is False
                and cycle.expected_content_length > 0
                and cycle.scope["method"] != "HEAD"
            ):
                self._head = data
            else:
                self._head = None
                self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        head = self._head
        if head is not None and head is not _NOT_YET:
            self._head = None
            self._transport.write(head)
        self._transport.close()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses an oversized request head before keeping it.

    Its own state is one attribute, ``_head``: the bytes of the head read so far (≥ 0) while a
    head is open, ``_HEAD_DONE`` between its end and the end of the message, or minus the refusal
    status once refused. uvicorn's protocol sets 28 attributes; at 31 an instance loses CPython's
    shared-key dict (296 → 1,584 bytes per connection, measured), which is why not three.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = 0
        self.pipeline = _Pipeline()  # type: ignore[assignment]  # appendleft, pop, len: see _Pipeline

    @property
    def _refused(self) -> int | None:
        return -self._head if self._head < _HEAD_DONE else None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
        super().connection_made(transport)
        writable = _ListEvent()
        writable.set()
        self.flow._is_writable_event = writable

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:
            return  # the refusal is written and the connection closing: ignore what follows
        if self._head >= 0:
            self._head += len(data)
        super().data_received(data)
        if self._refused is None and self._head > MAX_HEAD_BYTES:
            # Still no end of the head after this many bytes: refuse without waiting for one.
            self._refuse(414 if len(getattr(self, "url", b"")) > MAX_URL_BYTES else 431)
        if self._refused is not None:
            self._send_refusal()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head == _HEAD_DONE:
            self._head = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._refuse(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused is None:
            super().on_header(name, value)
            if len(self.headers) > MAX_HEADER_COUNT:
                self._refuse(431)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if self._refused is None and size > MAX_HEAD_BYTES:
            self._refuse(431)
        if self._refused is not None:
            return  # no request cycle: the application never sees this request
        self._head = _HEAD_DONE
        previous = self.cycle
        super().on_headers_complete()
        if self.cycle is not previous and self.cycle is not None:
            # A new cycle, whose task has not run yet: nothing waits on or has set its event,
            # nothing has been written.
            self.cycle.message_event = _ListEvent()
            self.cycle.transport = _OneWrite(self.cycle, self.transport)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        if self._refused is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused is None:
            super().on_message_complete()
            self._head = 0

    def _refuse(self, status: int) -> None:
        if self._refused is None:
            self._head = -status

    def eof_received(self) -> None:
        if self._refused is not None:
            self.transport.close()

    def _send_refusal(self) -> None:
        """Write the answer, then close gently: a socket closed while the client is still sending
        is reset, and a reset can destroy the answer before the client reads it. So the write side
        is shut first, what still arrives is dropped unread, and the socket closes when the client
        stops or after ``LINGER_SECONDS``, whichever comes first."""
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A response to an earlier pipelined request is still being written: writing into it
            # would corrupt it, and this client has broken the rules anyway.
            transport.close()
            return
        transport.write(_refusal(self._refused or 431))
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, transport.close)


def uvicorn_http_options(http_impl: str) -> dict[str, Any]:
    """``http`` (and h11's bound) for ``uvicorn.run`` / ``uvicorn.Config``, given the parser name
    ``service.serving.uvicorn_options`` chose."""
    if http_impl == "httptools":
        return {"http": BoundedHttpToolsProtocol}
    return {"http": http_impl, "h11_max_incomplete_event_size": MAX_HEAD_BYTES}
