"""A real local HTTP receiver for webhook tests: a tiny ASGI app served by uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tests.support.apps import free_port
from tests.support.serving import InProcessServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Receiver:
    """Records every event it is sent and answers each with ``answer``'s status. elicitd's
    verification challenge (``webhook.verification``, which every endpoint answers before it
    receives events) is kept apart in ``challenges`` and echoed, as an integration does; with
    ``echo`` off it is answered 200 without the value, as by a receiver that knows nothing of it."""

    url: str = ""
    # Decides the status for each request: (event id, how many times this id was seen) -> status.
    answer: Callable[[str, int], int] = lambda _event, _seen: 200
    delay: float = 0.0
    received: list[Received] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    max_in_flight: int = 0
    echo: bool = True
    challenges: list[Received] = field(default_factory=list)

    def ok(self) -> list[Received]:
        return [r for r in self.received if 200 <= r.status < 300]

    def delivered_ids(self) -> Counter[str]:
        return Counter(r.headers["elicitd-event-id"] for r in self.ok())

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if headers.get("elicitd-event-type") == "webhook.verification":
            self.challenges.append(Received(headers=headers, body=body, status=200))
            answer = {"challenge": json.loads(body)["data"]["challenge"]} if self.echo else {"ok": True}
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
            return
        event = headers.get("elicitd-event-id", "")
        self.seen[event] += 1
        self.in_flight[event] += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[event])
        try:
            if self.delay:
                await asyncio.sleep(self.delay)  # a slow receiver, so deliveries overlap for real
            status = self.answer(event, self.seen[event])
        finally:
            self.in_flight[event] -= 1
        self.received.append(Received(headers=headers, body=body, status=status))
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def receiving(receiver: Receiver | None = None) -> AsyncIterator[Receiver]:
    receiver = receiver or Receiver()
    port = free_port()
    server = InProcessServer(
        uvicorn.Config(receiver, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    )
    task = await server.start()
    receiver.url = f"http://127.0.0.1:{port}/hooks/elicitd"
    try:
        yield receiver
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
