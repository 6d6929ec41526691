"""A tiny real HTTP/1.1 server in front of elicitd that misbehaves on purpose.

Each incoming request takes the next step of a script: ``"503"`` (or any status) answers that
status with a problem+json body, optionally followed by ``code=…`` (the problem's code, default
``unavailable``) and ``retry-after=…`` (a ``Retry-After`` header), as in
``"503 code=payments_unavailable"`` or ``"503 retry-after=0"``; ``"drop"`` closes the connection without an answer, ``"forward-drop"`` forwards the
request to elicitd and then drops the connection (the answer is lost), ``"forward"`` proxies it.
When the script runs out every request is forwarded. Real sockets, so the client's transport
errors and retries are the ones production would see.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx


@dataclass
class FlakyServer:
    upstream: str
    script: list[str] = field(default_factory=list)
    seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request
    url: str = ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.seen.append((method, target.split("?", 1)[0]))
        step = self.script.pop(0) if self.script else "forward"
        if step == "drop":
            writer.close()
            return
        status, *options = step.split()
        if status.isdigit():
            named = dict(option.split("=", 1) for option in options)
            code = named.get("code", "unavailable")
            payload = json.dumps({"code": code, "status": int(status), "detail": f"flaky {code}"}).encode()
            extra = f"Retry-After: {named['retry-after']}\r\n" if "retry-after" in named else ""
            writer.write(
                f"HTTP/1.1 {status} Flaky\r\nContent-Type: application/problem+json\r\n{extra}"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            writer.close()
            return
        forward_headers = {k: v for k, v in headers.items() if k in {"authorization", "content-type", "accept"}}
        async with httpx.AsyncClient(base_url=self.upstream, timeout=60) as http:
            answer = await http.request(method, target, content=body, headers=forward_headers)
        if step == "forward-drop":
            writer.close()
            return
        writer.write(
            f"HTTP/1.1 {answer.status_code} X\r\nContent-Type: {answer.headers.get('content-type', '')}"
            f"\r\nContent-Length: {len(answer.content)}\r\nConnection: close\r\n\r\n".encode()
            + answer.content
        )
        await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def flaky_server(upstream: str, script: list[str] | None = None) -> AsyncIterator[FlakyServer]:
    flaky = FlakyServer(upstream=upstream, script=list(script or []))
    server = await asyncio.start_server(flaky._handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    flaky.url = f"http://127.0.0.1:{port}"
    try:
        yield flaky
    finally:
        server.close()
        await server.wait_closed()
