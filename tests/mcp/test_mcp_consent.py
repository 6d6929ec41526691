"""The example server's ``deploy``: consent first, through the SDK client and a real browser that
logs in and presses Approve / Decline on elicitd's consent page; the signed receipt verifies
against elicitd's published key."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from joserfc import jws
from joserfc.jwk import KeySet
from mcp_types import ElicitResult
from playwright.async_api import Page

from elicitd_client import ElicitdClient
from tests.mcp.conftest import OAuthEnv
from tests.mcp.harness import AUDIENCE, Mode, example_server, mcp_client, text_of
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.browser import is_login_page, login_at_issuer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class Approver:
    def __init__(self, page: Page, env: OAuthEnv, username: str, decision: str = "approve") -> None:
        self.page, self.env, self.username, self.decision = page, env, username, decision
        self.seen: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def callback(self, context: Any, params: Any) -> ElicitResult:
        self.seen.append(params.url)
        self.tasks.append(asyncio.get_running_loop().create_task(self.decide(params.url)))
        return ElicitResult(action="accept")

    async def decide(self, url: str) -> None:
        await self.page.goto(url)
        if await is_login_page(self.page):
            await login_at_issuer(self.page, self.username, issuer=self.env.iss)
        await self.page.locator("#consent-form").wait_for()
        async with self.page.expect_navigation():
            await self.page.click(f"#{self.decision}")

    async def settle(self) -> None:
        await asyncio.gather(*self.tasks)


@pytest.fixture
async def client(oauth_env: OAuthEnv) -> ServerClientHandle:
    return await new_server_client(oauth_env.app, display_name="Example Deployer")


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_deploy_after_approval_with_a_verifiable_receipt(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page, mode: Mode
) -> None:
    sub = f"u{uuid.uuid4().hex[:10]}"
    token = oauth_env.oauth.mint(sub, client_id=AUDIENCE)["id_token"]
    user = Approver(browser_page, oauth_env, sub)
    async with (
        example_server(oauth_env.app.url, client.api_key, oauth_env.iss) as server,
        mcp_client(server.url, token, mode=mode, elicitation_callback=user.callback) as mcp,
    ):
        result = await mcp.call_tool("deploy", {"service": "web", "environment": "prod"})
        await user.settle()
    assert result.is_error is False, result.content
    text = text_of(result)
    assert text.startswith("Deployed web to prod (consent receipt cr_")
    assert await browser_page.locator("#outcome").count() == 1

    flow_id = user.seen[0].rsplit("/", 1)[1]
    async with ElicitdClient(oauth_env.app.url, client.api_key) as api:
        done = await api.status(flow_id)
    assert done.result is not None and text.endswith(f"{done.result['receipt_id']}).")
    async with httpx.AsyncClient(base_url=oauth_env.app.url) as http:
        keys = KeySet.import_key_set((await http.get("/.well-known/jwks.json")).json())
    claims = json.loads(jws.deserialize_compact(done.result["receipt"], keys, algorithms=["ES256"]).payload)
    assert (claims["sub"], claims["subject_iss"], claims["flow_id"], claims["decision"]) == (
        sub,
        oauth_env.iss,
        flow_id,
        "approved",
    )


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_declined_on_the_page_is_a_normal_result(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page, mode: Mode
) -> None:
    sub = f"u{uuid.uuid4().hex[:10]}"
    token = oauth_env.oauth.mint(sub, client_id=AUDIENCE)["id_token"]
    user = Approver(browser_page, oauth_env, sub, decision="decline")
    async with (
        example_server(oauth_env.app.url, client.api_key, oauth_env.iss) as server,
        mcp_client(server.url, token, mode=mode, elicitation_callback=user.callback) as mcp,
    ):
        result = await mcp.call_tool("deploy", {"service": "web", "environment": "prod"})
        await user.settle()
    assert result.is_error is False
    assert text_of(result) == "Deploy of web to prod cancelled: not approved."


async def test_a_consent_round_cannot_be_replayed_for_other_arguments(
    oauth_env: OAuthEnv, client: ServerClientHandle
) -> None:
    """Why the SDK's request-state boundary stays: it binds the round to the tool's arguments,
    which elicitd never sees. Approving ``deploy(web, staging)`` must not finish ``deploy(web, prod)``."""
    from mcp import MCPError
    from mcp_types import InputRequiredResult

    token = oauth_env.oauth.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]

    async def accept(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept")

    async with (
        example_server(oauth_env.app.url, client.api_key, oauth_env.iss) as server,
        mcp_client(server.url, token, elicitation_callback=accept) as mcp,
    ):
        first = await mcp.session.call_tool(
            "deploy", {"service": "web", "environment": "staging"}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult) and first.input_requests and first.request_state
        (key,) = first.input_requests
        with pytest.raises(MCPError) as refused:
            await mcp.session.call_tool(
                "deploy",
                {"service": "web", "environment": "prod"},
                input_responses={key: ElicitResult(action="accept")},
                request_state=first.request_state,
                allow_input_required=True,
            )
    assert refused.value.error.code == -32602
    assert refused.value.error.message == "Invalid or expired requestState"
