"""Run the example MCP server for real (uvicorn in the test loop) and talk to it with the SDK's
own ``Client`` over streamable HTTP, carrying a bearer token signed by the test issuer."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
import uvicorn
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ElicitRequestURLParams, TextContent

from elicitd_client import ElicitdClient
from elicitd_client.mcp import Elicitd
from examples.mcp_server.server import ExampleConfig, build_server
from tests.support.apps import RunningApp, free_port
from tests.support.serving import InProcessServer
from tests.support.waiting import parked, until

logging.getLogger("httpx2").setLevel(logging.WARNING)
logging.getLogger("mcp").setLevel(logging.WARNING)

AUDIENCE = "example-mcp"
STATE_KEY = "k" * 43

# The protocol revisions a test client speaks: 2026-07-28 (input-required rounds) or 2025-11-25.
Mode = Literal["2026-07-28", "legacy"]
# What the person at the MCP client answers to an elicitation.
Action = Literal["accept", "decline", "cancel"]
# When the simulated person gets to the page, given the flow id: an event of the exchange (the
# client's retry waiting, some state-only rounds), never a guessed delay.
Gate = Callable[[str], Awaitable[None]]


@dataclass
class ExampleServer:
    url: str
    port: int
    mcp: MCPServer
    elicitd: Elicitd
    config: ExampleConfig


@contextlib.asynccontextmanager
async def example_server(
    elicitd_url: str,
    api_key: str,
    issuer: str,
    *,
    customize: Callable[[MCPServer, Elicitd], None] | None = None,
    port: int | None = None,
    **options: Any,
) -> AsyncIterator[ExampleServer]:
    """Start the example server. ``options`` go to ``Elicitd`` (``wait_seconds`` ...) or, when they
    name an ``ExampleConfig`` field, to the config."""
    port = port or free_port()
    config_fields = set(ExampleConfig.__dataclass_fields__)
    config = ExampleConfig(
        issuer=issuer,
        audience=AUDIENCE,
        resource_url=f"http://127.0.0.1:{port}/mcp",
        **{k: v for k, v in options.items() if k in config_fields},
    )
    client = ElicitdClient(elicitd_url, api_key)
    helper = Elicitd(client, **{k: v for k, v in options.items() if k not in config_fields})
    mcp = build_server(config, helper)
    if customize is not None:
        customize(mcp, helper)
    try:
        async with serve(mcp, port):
            yield ExampleServer(url=f"http://127.0.0.1:{port}/mcp", port=port, mcp=mcp, elicitd=helper, config=config)
    finally:
        await helper.aclose()
        await client.aclose()


@contextlib.asynccontextmanager
async def serve(mcp: MCPServer, port: int) -> AsyncIterator[str]:
    """Serve ``mcp`` over streamable HTTP on ``port``; yields the MCP endpoint URL."""
    server = InProcessServer(
        uvicorn.Config(
            mcp.streamable_http_app(),
            host="127.0.0.1",
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
    )
    task = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 10)


@dataclass
class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer in front of several replicas: each request goes to the next port."""

    ports: list[int]
    served: list[tuple[int, str]] = field(default_factory=list)  # (port, Mcp-Method header)

    def __post_init__(self) -> None:
        self._next = itertools.cycle(self.ports)
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self._next)
        request.url = request.url.copy_with(port=port)
        request.headers["host"] = f"127.0.0.1:{port}"
        self.served.append((port, request.headers.get("mcp-method", "")))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def mcp_client(
    url: str,
    bearer: str,
    *,
    mode: Mode = "2026-07-28",
    transport: httpx2.AsyncBaseTransport | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    """The SDK's ``Client`` with the user's bearer token (``options``: ``elicitation_callback`` ...)."""
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {bearer}"}, transport=transport, timeout=httpx2.Timeout(120)
    ) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client:
            yield client


class RoundLog(logging.Handler):
    """Collect the helper's per-round log records (outcome, state_only) to count rounds."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.rounds: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "elicitation round":
            self.rounds.append(
                {"outcome": record.__dict__.get("outcome"), "state_only": record.__dict__.get("state_only")}
            )


@contextlib.contextmanager
def round_log() -> Iterator[RoundLog]:
    handler = RoundLog()
    logger = logging.getLogger("elicitd_client.mcp")
    previous = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def flow_of(context: ClientRequestContext, params: ElicitRequestURLParams) -> str:
    """The flow id an elicitation names: the input key on 2026-07-28, elicitationId on 2025-11-25."""
    if params.elicitation_id:
        return str(params.elicitation_id)
    key = str(context.request_id)
    assert key.startswith("elicitd_fl_")
    return key.removeprefix("elicitd_")


def while_retrying(app: RunningApp) -> Gate:
    """Once the MCP client's retry waits at elicitd for the flow: the person finishes the page
    while the client is already retrying."""

    async def gate(flow_id: str) -> None:
        await parked(app, flow_id, timeout=30)

    return gate


def after_state_only_rounds(log: RoundLog, count: int) -> Gate:
    """Once the client has had ``count`` state-only rounds: retries that found the person busy."""

    async def gate(_flow_id: str) -> None:
        await until(
            lambda: sum(1 for r in log.rounds if r["state_only"]) >= count,
            timeout=30,
            what=f"{count} state-only rounds",
        )

    return gate


def text_of(result: CallToolResult) -> str:
    """The text of a tool result's first block: every tool of the example server answers in text."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text
