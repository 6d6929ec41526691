"""The client library forwards the user's own access token, so an MCP server built on it works
unchanged against a server client that must prove the subject.

The example server verifies the MCP client's JWT access tokens (audience: its resource URL, which
is also the server client's registered resource URI). ``require_token`` inside ``list_files``
creates, resolves and reads the token through ``ElicitdClient``, which takes the SDK's verified
token of the request and sends it as ``Elicitd-Subject-Token``; without it, elicitd refuses.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from mcp.client import ClientRequestContext
from mcp_types import ElicitRequestParams, ElicitResult
from playwright.async_api import Page

from elicitd_client import ElicitdClient, Subject, SubjectTokenInvalid, SubjectTokenRequired
from elicitd_client.mcp import Elicitd
from examples.mcp_server.server import ExampleConfig, build_server
from tests.mcp.conftest import OAuthEnv
from tests.mcp.harness import Mode, mcp_client, serve, text_of
from tests.mcp.test_mcp_oauth import FILES, BrowserUser
from tests.support.apps import LogCapture, ServerClientHandle, free_port, new_server_client

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@contextlib.asynccontextmanager
async def proving_server(
    env: OAuthEnv, *, client: ElicitdClient, port: int, resource: str, handle: ServerClientHandle | None = None
) -> AsyncIterator[str]:
    """The example server for ``resource``; with ``handle``, ``file_count`` exchanges as that client."""
    config = ExampleConfig(
        issuer=env.iss,
        audience=resource,
        resource_url=resource,
        provider=env.provider,
        scopes=("files:read",),
        files_url=env.oauth.url("/api/files"),
        elicitd_url=env.app.url if handle else None,
        client_name=handle.name if handle else "dev",
        api_key=handle.api_key if handle else None,
    )
    helper = Elicitd(client)
    try:
        async with serve(build_server(config, helper), port) as url:
            yield url
    finally:
        await helper.aclose()
        await client.aclose()


async def proving_client(env: OAuthEnv, resource: str) -> ServerClientHandle:
    return await new_server_client(
        env.app, display_name="Example Files Assistant", subject_proof="required", resource_uris=[resource]
    )


def access_token(env: OAuthEnv, sub: str, resource: str) -> str:
    """What the MCP host holds: a JWT access token the users' issuer made for the example server."""
    return str(
        env.oauth.mint(sub, client_id="mcp-host", scope="files", audience=resource, format="jwt")["access_token"]
    )


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_require_token_forwards_the_users_token_on_every_call(
    oauth_env: OAuthEnv, browser_page: Page, mode: Mode
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    client = await proving_client(oauth_env, resource)
    sub = f"u{uuid.uuid4().hex[:10]}"
    user = BrowserUser(browser_page, oauth_env, sub)
    async with (
        proving_server(
            oauth_env, client=ElicitdClient(oauth_env.app.url, client.api_key), port=port, resource=resource
        ) as url,
        mcp_client(url, access_token(oauth_env, sub, resource), mode=mode, elicitation_callback=user.callback()) as mcp,
    ):
        first = await mcp.call_tool("list_files", {})
        await user.settle()
        second = await mcp.call_tool("list_files", {})
    assert first.is_error is False, first.content
    assert text_of(first) == text_of(second) == FILES
    assert len(user.seen) == 1


async def test_the_example_exchanges_the_users_token_and_connects_first_when_it_must(
    oauth_env: OAuthEnv, browser_page: Page
) -> None:
    """``file_count`` asks elicitd's RFC 8693 endpoint: ``invalid_grant`` before the user connected
    (so it starts the connect flow), the provider's token afterwards, with nobody asked again."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    client = await proving_client(oauth_env, resource)
    sub = f"u{uuid.uuid4().hex[:10]}"
    user = BrowserUser(browser_page, oauth_env, sub)
    capture = LogCapture()
    logger = logging.getLogger("elicitd.oauth")
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    try:
        async with (
            proving_server(
                oauth_env,
                client=ElicitdClient(oauth_env.app.url, client.api_key),
                port=port,
                resource=resource,
                handle=client,
            ) as url,
            mcp_client(url, access_token(oauth_env, sub, resource), elicitation_callback=user.callback()) as mcp,
        ):
            first = await mcp.call_tool("file_count", {})
            await user.settle()
            exchanged_before = sum("token exchanged" in line for line in capture.lines)
            second = await mcp.call_tool("file_count", {})
    finally:
        logger.removeHandler(capture)
    assert text_of(first) == text_of(second) == "You have 2 files."
    assert len(user.seen) == 1  # the connect flow, once
    assert exchanged_before == 0  # the first call's exchange found no connection
    assert sum("token exchanged" in line for line in capture.lines) == 1


async def test_without_the_users_token_elicitd_refuses_and_the_tool_says_why(oauth_env: OAuthEnv) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    client = await proving_client(oauth_env, resource)
    sub = f"u{uuid.uuid4().hex[:10]}"
    silent = ElicitdClient(oauth_env.app.url, client.api_key, subject_tokens=lambda: None)
    asked: list[ElicitRequestParams] = []

    async def never(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="decline")

    async with (
        proving_server(oauth_env, client=silent, port=port, resource=resource) as url,
        mcp_client(url, access_token(oauth_env, sub, resource), elicitation_callback=never) as mcp,
    ):
        result = await mcp.call_tool("list_files", {})
    assert result.is_error is True
    assert asked == []  # refused before anybody was asked anything
    assert "[subject_token_required]" in text_of(result)


async def test_outside_a_tool_the_token_is_passed_explicitly(oauth_env: OAuthEnv) -> None:
    resource = "https://files.example.com/mcp"
    client = await proving_client(oauth_env, resource)
    alice, bob = (f"{name}{uuid.uuid4().hex[:8]}" for name in ("alice", "bob"))
    async with ElicitdClient(oauth_env.app.url, client.api_key) as api:
        with pytest.raises(SubjectTokenRequired) as missing:
            await api.create_flow(Subject(oauth_env.iss, alice), "external", url="http://127.0.0.1:9/step")
        with pytest.raises(SubjectTokenInvalid) as other:
            await api.create_flow(
                Subject(oauth_env.iss, bob),
                "external",
                url="http://127.0.0.1:9/step",
                subject_token=access_token(oauth_env, alice, resource),
            )
        created = await api.create_flow(
            Subject(oauth_env.iss, alice),
            "external",
            url="http://127.0.0.1:9/step",
            subject_token=access_token(oauth_env, alice, resource),
        )
    assert (missing.value.status, missing.value.code) == (401, "subject_token_required")
    assert (other.value.status, other.value.problem["reason"]) == (403, "other_subject")
    assert created.created and created.flow.status == "pending"
