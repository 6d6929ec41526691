"""2025-11-25 completion notifications behind a load balancer: two replicas of the example server,
no webhook, and every session gets its ``notifications/elicitation/complete`` — whichever replica
holds it — because each replica consumes elicitd's event stream. The browser path is real:
Chromium opens each user's link and logs in at the test OAuth server."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from mcp import MCPError, UrlElicitationRequiredError
from mcp.client import ClientRequestContext
from mcp_types import ElicitRequestParams, ElicitResult
from playwright.async_api import Browser

from tests.mcp.balancer import balancing
from tests.mcp.conftest import OAuthEnv
from tests.mcp.harness import mcp_client, text_of
from tests.mcp.test_mcp_oauth import FILES, BrowserUser, Notifications, files_server, new_user
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.browser import new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = 4


@pytest.fixture
async def client(oauth_env: OAuthEnv) -> ServerClientHandle:
    return await new_server_client(oauth_env.app, display_name="Replicated Files Assistant")


async def never_asked(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """The client supports URL elicitation; with ``legacy="error"`` nothing is pushed to it."""
    raise AssertionError(f"unexpected elicitation: {params}")


async def test_every_session_is_notified_whichever_replica_holds_it(
    oauth_env: OAuthEnv, client: ServerClientHandle, chromium_browser: Browser
) -> None:
    async with (
        files_server(oauth_env, client, legacy="error") as one,
        files_server(oauth_env, client, legacy="error") as two,
        balancing([one.port, two.port]) as balancer,
        contextlib.AsyncExitStack() as stack,
    ):
        users = [new_user(oauth_env) for _ in range(USERS)]
        notes = [Notifications() for _ in users]
        sessions = [
            await stack.enter_async_context(
                mcp_client(
                    balancer.url + "/mcp", token, mode="legacy", message_handler=note, elicitation_callback=never_asked
                )
            )
            for (_, token), note in zip(users, notes, strict=True)
        ]
        # Round one: each call needs the user and answers -32042 with the URL at once.
        elicitations = []
        for session in sessions:
            with pytest.raises(MCPError) as needed:
                await session.call_tool("list_files", {})
            assert needed.value.error.code == -32042
            elicitations.append(UrlElicitationRequiredError.from_error(needed.value.error).elicitations[0])
        # The sessions are spread over both replicas, and only the holder knows each one.
        assert set(balancer.sessions.values()) == {one.port, two.port}
        # Each person finishes in a browser of their own (own cookies at elicitd and at the
        # issuer); no webhook is configured anywhere.
        for (sub, _), elicitation in zip(users, elicitations, strict=True):
            context = await new_context(chromium_browser)
            try:
                page = await context.new_page()
                await BrowserUser(page, oauth_env, sub).open(elicitation.url)
            finally:
                await context.close()
        await asyncio.wait_for(asyncio.gather(*(note.arrived.wait() for note in notes)), 30)
        assert [note.completed for note in notes] == [[e.elicitation_id] for e in elicitations]
        # One event-stream consumer per replica process, not one per session.
        assert oauth_env.app.state.events.consumers_of(client.id) == 2
        # Told, each client retries and gets its files.
        for session in sessions:
            assert text_of(await session.call_tool("list_files", {})) == FILES
