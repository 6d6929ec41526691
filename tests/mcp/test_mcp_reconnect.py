"""``require_token`` reconnects by itself: the example server's ``list_files`` after the provider
dropped the grant gets ``reauthorization_required`` from the token endpoint, and the client
library starts the reconnect (the same ``oauth_connect`` flow, which elicitd makes a reconnect of
that connection) instead of failing the tool call; once the person has reconnected in Chromium
the call returns the files, with the same connection id."""

from __future__ import annotations

import pytest
from playwright.async_api import Page
from sqlalchemy import text

from elicitd_client import ElicitdClient, Subject
from tests.mcp.conftest import OAuthEnv
from tests.mcp.harness import Mode, text_of
from tests.mcp.test_mcp_oauth import FILES, first_files_call
from tests.support.apps import ServerClientHandle, new_server_client

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
async def client(oauth_env: OAuthEnv) -> ServerClientHandle:
    return await new_server_client(oauth_env.app, display_name="Example Files Assistant")


async def connection_ids(env: OAuthEnv, sub: str) -> list[tuple[str, str]]:
    async with env.app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT id::text, health FROM connections WHERE subject_sub = :s ORDER BY id"), {"s": sub}
        )
        return [(r[0], r[1]) for r in rows]


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_require_token_reconnects_when_the_provider_dropped_the_grant(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page, mode: Mode
) -> None:
    async with first_files_call(oauth_env, client, browser_page, mode) as call:
        sub, user, mcp, first = call.sub, call.user, call.mcp, call.result
        assert text_of(first) == FILES
        connected = await connection_ids(oauth_env, sub)
        # The token is due and the provider refuses its refresh: the next token call answers 409.
        async with oauth_env.app.state.sessions() as session:
            await session.execute(
                text("UPDATE authorizations SET expires_at = now() WHERE subject_sub = :s"), {"s": sub}
            )
            await session.commit()
        oauth_env.oauth.fail_next_refresh("invalid_grant")
        await browser_page.context.clear_cookies()  # the person comes back later: signs in again

        again = await mcp.call_tool("list_files", {})
        await user.settle()
        if mode == "legacy" and again.is_error:
            again = await mcp.call_tool("list_files", {})  # push style: the call after the notification

    assert again.is_error is False, again.content
    assert text_of(again) == FILES
    assert len(user.seen) == 2  # asked once to connect, once to reconnect
    assert [cid for cid, _ in await connection_ids(oauth_env, sub)] == [cid for cid, _ in connected]
    assert [health for _, health in await connection_ids(oauth_env, sub)] == ["healthy"]
    async with ElicitdClient(oauth_env.app.url, client.api_key) as api:
        issued = await api.token(oauth_env.provider, Subject(oauth_env.iss, sub), scopes=["files:read"])
    assert issued.connection_id == "cn_" + connected[0][0].replace("-", "")
