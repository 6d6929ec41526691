"""The two ways to let a helper answer ``input_required`` (``install`` and ``@elicitd.tool``), a
custom subject source, and what happens when the wiring is missing."""

from __future__ import annotations

import uuid

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import InputRequiredResult

from elicitd_client import ElicitdClient, Subject
from elicitd_client.mcp import Elicitd
from tests.mcp.harness import serve, text_of, while_retrying
from tests.mcp.test_mcp_external import PAGE, finishing
from tests.support.apps import RunningApp, ServerClientHandle, free_port


async def test_decorator_and_custom_subject_without_install(
    elicitd: RunningApp, server_client: ServerClientHandle
) -> None:
    subject = Subject("https://id.example.com", f"u{uuid.uuid4().hex[:8]}")
    seen: list[tuple[str, str]] = []
    async with ElicitdClient(elicitd.url, server_client.api_key) as api:
        helper = Elicitd(api, subject=lambda ctx: subject)
        mcp = MCPServer("bare", log_level="WARNING")

        @mcp.tool()
        @helper.tool
        async def decorated(ctx: Context) -> str | InputRequiredResult:
            done = await helper.require(ctx, "external", url=f"{PAGE}/decorated")
            return f"ok {done.result['who']}"

        @mcp.tool()
        async def undecorated(ctx: Context) -> str:
            await helper.require(ctx, "external", url=f"{PAGE}/undecorated")
            return "unreachable"

        async with (
            serve(mcp, free_port()) as url,
            httpx2.AsyncClient() as http,
            Client(
                streamable_http_client(url, http_client=http),
                mode="2026-07-28",
                elicitation_callback=finishing(api, while_retrying(elicitd), seen=seen),
            ) as client,
        ):
            result = await client.call_tool("decorated", {})
            assert result.is_error is False, result.content
            assert text_of(result) == "ok alice"
            flow = (await api.status(seen[0][0])).flow
            assert flow.subject == subject

            with pytest.raises(MCPError) as unwired:  # an unwired InputRequired must not pass silently
                await client.call_tool("undecorated", {})
    assert unwired.value.error.code == -32603
    assert "Elicitd.install(server)" in unwired.value.error.message


async def test_without_a_verified_user_the_tool_fails_closed(
    elicitd: RunningApp, server_client: ServerClientHandle
) -> None:
    async with ElicitdClient(elicitd.url, server_client.api_key) as api:
        helper = Elicitd(api)  # default: the SDK access token, absent on this server
        mcp = MCPServer("noauth", log_level="WARNING")
        helper.install(mcp)

        @mcp.tool()
        async def needs_user(ctx: Context) -> str:
            await helper.require(ctx, "external", url=f"{PAGE}/x")
            return "unreachable"

        async with (
            serve(mcp, free_port()) as url,
            httpx2.AsyncClient() as http,
            Client(
                streamable_http_client(url, http_client=http),
                mode="2026-07-28",
                elicitation_callback=finishing(api, None),
            ) as client,
        ):
            result = await client.call_tool("needs_user", {})
    assert result.is_error is True
    # A crash for the server's log, not a message for the model: no detail leaves the server.
    assert text_of(result) == "Error executing tool needs_user"
