"""Two replicas of the example server behind one address: a round started on one and retried on
the other completes, because elicitd keeps the flow and the replicas share the SDK state keys."""

from __future__ import annotations

import functools
import uuid

import pytest
from mcp import MCPError

from elicitd_client import ElicitdClient
from tests.mcp.harness import AUDIENCE, STATE_KEY, RoundRobin, example_server, mcp_client, text_of, while_retrying
from tests.mcp.test_mcp_external import add_external_tools, finishing
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer


async def test_round_started_on_one_replica_completes_on_the_other(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer
) -> None:
    token = oauth_server.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]
    seen: list[tuple[str, str]] = []
    replica = functools.partial(
        example_server,
        elicitd.url,
        server_client.api_key,
        oauth_server.issuer,
        customize=add_external_tools,
        state_keys=(STATE_KEY,),
    )
    async with ElicitdClient(elicitd.url, server_client.api_key) as api, replica() as one, replica() as two:
        balancer = RoundRobin([one.port, two.port])
        async with mcp_client(
            one.url, token, transport=balancer, elicitation_callback=finishing(api, while_retrying(elicitd), seen=seen)
        ) as client:
            balancer.served.clear()
            result = await client.call_tool("verify", {"step": "replicas"})
    assert result.is_error is False, result.content
    assert text_of(result) == f"verified alice via {seen[0][0]}"
    calls = [port for port, method in balancer.served if method == "tools/call"]
    assert len(calls) >= 2 and calls[0] != calls[1]  # round 1 on one replica, the retry on the other
    assert {one.port, two.port} <= set(calls)


async def test_replicas_with_their_own_state_keys_refuse_each_others_rounds(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer
) -> None:
    """The control case: without shared SDK keys the other replica cannot open the state."""
    token = oauth_server.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]
    async with (
        ElicitdClient(elicitd.url, server_client.api_key) as api,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as one,
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_external_tools) as two,
    ):
        balancer = RoundRobin([one.port, two.port])
        async with mcp_client(one.url, token, transport=balancer, elicitation_callback=finishing(api, None)) as client:
            balancer.served.clear()
            with pytest.raises(MCPError) as refused:
                await client.call_tool("verify", {"step": "unshared"})
    assert refused.value.error.code == -32602
    assert refused.value.error.message == "Invalid or expired requestState"
