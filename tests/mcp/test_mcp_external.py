"""The SDK helper end to end with an ``external`` flow: the real SDK on both sides (the example
server and ``mcp.Client``), a real elicitd, and bearer JWTs signed by the real test issuer. The
"browser" here is the test finishing the flow through the API, as the caller's own page would."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from mcp import MCPError
from mcp.client import ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult

from elicitd_client import ElicitdClient
from elicitd_client.mcp import Elicitd
from tests.mcp.harness import (
    AUDIENCE,
    Action,
    Gate,
    Mode,
    after_state_only_rounds,
    example_server,
    flow_of,
    mcp_client,
    round_log,
    text_of,
    while_retrying,
)
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer

PAGE = "https://app.example.com/verify"


def add_external_tools(mcp: MCPServer, elicitd: Elicitd) -> None:
    @mcp.tool()
    async def verify(step: str, ctx: Context) -> str:
        done = await elicitd.require(ctx, "external", url=f"{PAGE}/{step}", message=f"Verify {step}")
        return f"verified {done.result['who']} via {done.flow_id}"

    @mcp.tool()
    async def two_steps(ctx: Context) -> str:
        first = await elicitd.require(ctx, "external", url=f"{PAGE}/one")
        second = await elicitd.require(ctx, "external", url=f"{PAGE}/two")
        return f"{first.result['who']}+{second.result['who']}"


def finishing(
    api: ElicitdClient,
    when: Gate | None,
    *,
    action: Action = "accept",
    who: str = "alice",
    seen: list[tuple[str, str]] | None = None,
) -> ElicitationFnT:
    """An elicitation callback: record the URL, answer ``action``; on accept finish the flow in the
    background once ``when`` lets it (``while_retrying``: the user completing the page while the
    client already retries). With ``when`` None the user never finishes."""

    async def callback(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestURLParams), params
        flow_id = flow_of(context, params)
        if seen is not None:
            seen.append((flow_id, params.url))
        if action == "accept" and when is not None:
            gate = when

            async def finish() -> None:
                await gate(flow_id)
                await api.complete(flow_id, {"who": who})

            asyncio.get_running_loop().create_task(finish())
        return ElicitResult(action=action)

    return callback


@pytest.fixture
def user(oauth_server: OAuthServer) -> tuple[str, str]:
    """A fresh user and the MCP access token the test issuer signed for them (aud = the example)."""
    sub = f"u{uuid.uuid4().hex[:10]}"
    return sub, oauth_server.mint(sub, client_id=AUDIENCE)["id_token"]


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_external_step_completes(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str], mode: Mode
) -> None:
    sub, token = user
    seen: list[tuple[str, str]] = []
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as server,
        mcp_client(
            server.url, token, mode=mode, elicitation_callback=finishing(api, while_retrying(elicitd), seen=seen)
        ) as client,
    ):
        assert client.protocol_version == ("2026-07-28" if mode == "2026-07-28" else "2025-11-25")
        result = await client.call_tool("verify", {"step": "email"})
        assert result.is_error is False, result.content
        assert len(seen) == 1 and seen[0][1] == f"{PAGE}/email"
        flow_id = seen[0][0]
        assert text_of(result) == f"verified alice via {flow_id}"
        status = await api.status(flow_id)
        assert status.flow.status == "completed"
        assert status.flow.subject is not None and (status.flow.subject.iss, status.flow.subject.sub) == (
            oauth_server.issuer,
            sub,
        )


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_decline_is_a_readable_tool_result(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str], mode: Mode
) -> None:
    seen: list[tuple[str, str]] = []
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as server,
        mcp_client(
            server.url,
            user[1],
            mode=mode,
            elicitation_callback=finishing(api, None, action="decline", seen=seen),
        ) as client,
    ):
        result = await client.call_tool("verify", {"step": "phone"})
        assert result.is_error is True
        assert text_of(result) == "Error executing tool verify: The user declined."
        assert (await api.status(seen[0][0])).flow.status == "declined"


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_cancel_then_the_next_call_reuses_the_flow(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str], mode: Mode
) -> None:
    seen: list[tuple[str, str]] = []
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as server,
    ):
        async with mcp_client(
            server.url,
            user[1],
            mode=mode,
            elicitation_callback=finishing(api, None, action="cancel", seen=seen),
        ) as client:
            cancelled = await client.call_tool("verify", {"step": "id"})
        assert cancelled.is_error is True
        assert "dismissed" in text_of(cancelled)
        assert (await api.status(seen[0][0])).flow.status == "pending"
        async with mcp_client(
            server.url,
            user[1],
            mode=mode,
            elicitation_callback=finishing(api, while_retrying(elicitd), seen=seen),
        ) as client:
            done = await client.call_tool("verify", {"step": "id"})
        assert done.is_error is False, done.content
        assert seen[1] == seen[0]  # same flow id, same URL
        assert text_of(done) == f"verified alice via {seen[0][0]}"


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_client_without_url_capability_gets_32021(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str], mode: Mode
) -> None:
    async with (
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as server,
        mcp_client(server.url, user[1], mode=mode) as client,
    ):
        with pytest.raises(MCPError) as refused:
            await client.call_tool("verify", {"step": "x"})
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_retry_before_the_user_finished_gets_state_only_rounds(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str]
) -> None:
    seen: list[tuple[str, str]] = []
    with round_log() as log:
        async with (
            ElicitdClient(elicitd.url, server_client.api_key) as api,
            example_server(
                elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools, wait_seconds=0.5
            ) as server,
            mcp_client(
                server.url, user[1], elicitation_callback=finishing(api, after_state_only_rounds(log, 2), seen=seen)
            ) as client,
        ):
            started = time.monotonic()
            result = await client.call_tool("verify", {"step": "slow"})
            elapsed = time.monotonic() - started
    assert result.is_error is False, result.content
    outcomes = [(r["outcome"], r["state_only"]) for r in log.rounds]
    # Round 1 asked (not logged: it is a create); then retries that found the user still busy,
    # each answered state-only, then the completion — all within the SDK's default 10 rounds.
    assert outcomes[-1] == ("completed", False)
    assert outcomes[:-1] and all(o == ("input_required", True) for o in outcomes[:-1])
    assert 3 <= len(outcomes) + 1 <= 10
    assert elapsed < 10


async def test_budget_runs_out_as_pending_not_a_round_cap_error(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str]
) -> None:
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(
            elicitd.url,
            server_client.api_key,
            oauth_server.issuer,
            customize=add_external_tools,
            wait_seconds=0.3,
            budget_seconds=1.5,
        ) as server,
        mcp_client(server.url, user[1], elicitation_callback=finishing(api, None)) as client,
    ):
        result = await client.call_tool("verify", {"step": "never"})
    assert result.is_error is True
    assert "Still waiting for you to finish in the browser" in text_of(result)


async def test_two_requirements_in_one_tool(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, user: tuple[str, str]
) -> None:
    seen: list[tuple[str, str]] = []
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as server,
        mcp_client(
            server.url, user[1], elicitation_callback=finishing(api, while_retrying(elicitd), seen=seen)
        ) as client,
    ):
        result = await client.call_tool("two_steps", {})
    assert result.is_error is False, result.content
    assert text_of(result) == "alice+alice"
    assert [url for _, url in seen] == [f"{PAGE}/one", f"{PAGE}/two"]
