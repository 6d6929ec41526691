"""A small HTTP server that misbehaves on purpose, for the outbound-failure tests.

Each path answers with one ``Behavior``: ``Hang`` (read the request, then never answer),
``Reset`` (close the connection at once, with a reset), or ``Answer`` (any status, body and
content type: garbage, HTML, a JSON document nested a hundred thousand deep, a discovery
document naming endpoints elsewhere). It runs in threads of its own, so a busy test event loop
never delays it, and ``https://`` to its plain-HTTP port is a TLS handshake that fails.
``closed_port()`` gives a loopback port nothing listens on.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import struct
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hang:
    """Read the request, then hold the connection open without a byte of answer."""


@dataclass(frozen=True)
class Reset:
    """Close the connection with a TCP reset as soon as the request arrives."""


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"

    @classmethod
    def json(cls, document: Any, status: int = 200) -> Answer:
        return cls(status=status, body=json.dumps(document).encode())


Behavior = Hang | Reset | Answer

GARBAGE = Answer(200, b"<html><body>Service temporarily unavailable</body></html>", "text/html")
NOT_JSON_BUT_SAYS_SO = Answer(200, b"{not json at all", "application/json")
DEEP_JSON = Answer(200, b"[" * 100_000 + b"]" * 100_000, "application/json")
SERVER_ERROR = Answer(503, b"upstream down", "text/plain")
# The ways any outbound endpoint can fail, by the path a ``HostileServer`` serves each on: every
# outbound-failure test puts its endpoint through all of them (and adds its own bad answers).
FAILURES: Mapping[str, Behavior] = {
    "/hang": Hang(),
    "/reset": Reset(),
    "/garbage": GARBAGE,
    "/notjson": NOT_JSON_BUT_SAYS_SO,
    "/deep": DEEP_JSON,
    "/down": SERVER_ERROR,
}


def closed_port() -> int:
    """A loopback port with no listener (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HostileServer:
    routes: Mapping[str, Behavior] = field(default_factory=dict)
    default: Behavior = field(default_factory=Hang)
    requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server._serve(self.request)

        class Threaded(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Threaded(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        """``https://`` to this plain-HTTP port: every call fails in the TLS handshake."""
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        raw = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in raw and len(raw) < 65536:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                raw += chunk
        line = raw.split(b"\r\n", 1)[0].decode("latin-1")
        path = line.split(" ")[1].split("?")[0] if line.count(" ") >= 2 else ""
        self.requests.append(path)
        behavior = self.routes.get(path, self.default)
        if isinstance(behavior, Hang):
            self._stop.wait(60)
        elif isinstance(behavior, Reset):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            head = (
                f"HTTP/1.1 {behavior.status} X\r\nContent-Type: {behavior.content_type}\r\n"
                f"Content-Length: {len(behavior.body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            with contextlib.suppress(OSError):
                conn.sendall(head + behavior.body)
        with contextlib.suppress(OSError):
            conn.close()


@contextlib.contextmanager
def hostile(routes: Mapping[str, Behavior] | None = None, default: Behavior | None = None) -> Iterator[HostileServer]:
    with HostileServer(routes=dict(routes or {}), default=default or Hang()) as server:
        yield server
