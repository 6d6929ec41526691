"""uvicorn servers that run inside the test process's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn


class InProcessServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone.

    uvicorn installs SIGINT/SIGTERM handlers while it serves and puts the previous ones back when it
    stops. Several servers share one test process and stop in any order, so the last to restore can
    leave a stopped server's handler in place, and Ctrl+C would no longer interrupt pytest.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._listening.set()

    async def start(self) -> asyncio.Task[None]:
        """Serve in a task; return it once the server listens, or raise why it could not start."""
        task = asyncio.create_task(self.serve())
        listening = asyncio.ensure_future(self._listening.wait())
        try:
            await asyncio.wait((task, listening), return_when=asyncio.FIRST_COMPLETED)
        finally:
            listening.cancel()
        if not self.started:
            if task.done():
                task.result()
            raise RuntimeError("the server stopped before it listened")
        return task
