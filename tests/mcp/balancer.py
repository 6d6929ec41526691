"""A tiny HTTP load balancer in front of MCP-server replicas, as a real process boundary would be.

New sessions go round-robin; a request carrying ``Mcp-Session-Id`` goes to the replica that
issued that session (2025-11-25 sessions live in one replica's memory, so every balancer in front
of such servers is sticky on that header). Responses stream through unchanged (SSE included).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

from tests.support.apps import free_port
from tests.support.serving import InProcessServer

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host", "content-length"}


@dataclass
class Balancer:
    ports: list[int]
    url: str = ""
    # Mcp-Session-Id -> the replica's port that issued it.
    sessions: dict[str, int] = field(default_factory=dict)
    served: list[tuple[int, str]] = field(default_factory=list)  # (port, method) per request

    def __post_init__(self) -> None:
        self._next = itertools.cycle(self.ports)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self._http.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        session = next((v for k, v in headers if k.lower() == "mcp-session-id"), None)
        port = self.sessions.get(session, 0) if session else 0
        port = port or next(self._next)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope.get("query_string", b"").decode()
        target = f"http://127.0.0.1:{port}{scope['path']}" + (f"?{query}" if query else "")
        forwarded = [(k, v) for k, v in headers if k.lower() not in _HOP]
        self.served.append((port, scope["method"]))
        request = self._http.build_request(scope["method"], target, headers=forwarded, content=body)
        response = await self._http.send(request, stream=True)
        try:
            issued = response.headers.get("mcp-session-id")
            if issued:
                self.sessions[issued] = port
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k.encode("latin-1"), v.encode("latin-1"))
                        for k, v in response.headers.multi_items()
                        if k.lower() not in _HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


@contextlib.asynccontextmanager
async def balancing(ports: list[int]) -> AsyncIterator[Balancer]:
    balancer = Balancer(ports)
    port = free_port()
    balancer.url = f"http://127.0.0.1:{port}"
    server = InProcessServer(
        uvicorn.Config(
            balancer, host="127.0.0.1", port=port, log_config=None, access_log=False, timeout_graceful_shutdown=1
        )
    )
    task = await server.start()
    try:
        yield balancer
    finally:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await task
