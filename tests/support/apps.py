"""Run real elicitd instances (uvicorn on a loopback port) inside the test event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from litestar import Litestar

from service.app import create_app
from service.clock import Clock
from service.db.base import CLIENT_ID
from service.identity.clients import create_server_client
from service.services import Services, build_services
from service.serving import server_options
from service.settings import Settings
from tests.support.serving import InProcessServer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningApp:
    url: str
    app: Litestar
    settings: Settings
    services: Services

    @property
    def state(self) -> Services:
        """The instance's services (tests reach its database sessions, flows, vault … here)."""
        return self.services

    def http(self, api_key: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        headers.update(kwargs.pop("headers", None) or {})
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=60, **kwargs)


@contextlib.asynccontextmanager
async def running_app(
    settings: Settings,
    port: int | None = None,
    *,
    keep_public_url: bool = False,
    customize: Callable[[Services], Services] | None = None,
    routes: Sequence[Any] = (),
    clock: Clock | None = None,
) -> AsyncIterator[RunningApp]:
    """Serve ``create_app(settings)`` for real: lifespan, sockets, background tasks and all.

    The public URL becomes this instance's address unless ``keep_public_url`` (replicas behind
    one address share it). ``customize`` may swap parts of the services (a test kind page),
    ``routes`` adds test-only routes, and ``clock`` (a ``tests.support.clock.ManualClock``) puts
    every service's own timing in the test's hands."""
    port = port or free_port()
    if not keep_public_url:
        settings = settings.with_(public_url=f"http://127.0.0.1:{port}")
    services = build_services(settings, clock=clock)
    if customize is not None:
        services = customize(services)
    app = create_app(services)
    for route in routes:
        app.register(route)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
        # The protocol elicitd serves with (its request-head bounds), not uvicorn's default.
        http=server_options()["http"],
    )
    server = InProcessServer(config)
    task = await server.start()
    try:
        yield RunningApp(url=f"http://127.0.0.1:{port}", app=app, settings=settings, services=services)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


@dataclass
class ServerClientHandle:
    id: uuid.UUID
    public_id: str
    name: str
    api_key: str


async def new_server_client(app: RunningApp, **kwargs: Any) -> ServerClientHandle:
    """A registered server client. Unless a test asks for ``subject_proof="required"``, it names
    users without their tokens, as every client did before subject proof existed: the tests of
    flows, connections and kinds stay about those, and tests/identity/test_subject_proof.py is
    about the proof."""
    name = kwargs.pop("name", None) or f"t-{uuid.uuid4().hex[:12]}"
    kwargs.setdefault("subject_proof", "none")
    async with app.state.sessions() as session:
        created = await create_server_client(session, name, **kwargs)
        await session.commit()
    return ServerClientHandle(
        id=created.client.id, public_id=CLIENT_ID.format(created.client.id), name=name, api_key=created.api_key
    )


class LogCapture(logging.Handler):
    """Collect every formatted log line elicitd writes (for leak tests)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        from service.logs import JsonFormatter

        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
