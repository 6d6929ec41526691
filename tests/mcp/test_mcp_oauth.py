"""The example server's ``list_files`` end to end: the SDK's ``Client`` whose elicitation callback
opens the URL in headless Chromium and logs in at the real OAuth server, elicitd connecting the
account, and the tool calling the provider's ``/api/files`` with the user's token — on 2026-07-28
(input-required rounds) and on 2025-11-25 (push style, -32042, and the completion notification
that elicitd's webhook triggers)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client import ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp_types import (
    CallToolResult,
    ElicitCompleteNotification,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
)
from playwright.async_api import Page

from elicitd_client import ElicitdClient, NotConnected, Subject
from service.admin.clients import set_webhook
from tests.admin.conftest import until_verified
from tests.mcp.conftest import PROVIDER_CLIENT_ID, OAuthEnv
from tests.mcp.harness import (
    AUDIENCE,
    Action,
    ExampleServer,
    Gate,
    Mode,
    after_state_only_rounds,
    example_server,
    flow_of,
    mcp_client,
    round_log,
    text_of,
)
from tests.support.apps import ServerClientHandle, free_port, new_server_client
from tests.support.browser import login_at_issuer

pytestmark = [pytest.mark.browser, pytest.mark.slow]
FILES = "2 files: notes.txt, report.pdf"


class BrowserUser:
    """The person at the MCP client: answers the dialog, then (in the background, like a real
    user switching to the browser) opens the URL and logs in as ``username``."""

    def __init__(self, page: Page, env: OAuthEnv, username: str) -> None:
        self.page = page
        self.env = env
        self.username = username
        self.seen: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    def callback(self, *, action: Action = "accept", when: Gate | None = None) -> ElicitationFnT:
        """On accept the user opens the URL at once, or once ``when`` lets them."""

        async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            assert isinstance(params, ElicitRequestURLParams), params
            self.seen.append(params.url)
            if action == "accept":
                opening = self.open(params.url, when, flow_of(context, params) if when else "")
                self.tasks.append(asyncio.get_running_loop().create_task(opening))
            return ElicitResult(action=action)

        return answer

    async def open(self, url: str, when: Gate | None = None, flow_id: str = "") -> None:
        if when is not None:
            await when(flow_id)
        page = self.page
        await page.goto(url)
        await login_at_issuer(page, self.username, issuer=self.env.iss)
        if await page.locator("h1.error").count():
            return  # refused: this link belongs to another account
        await page.locator("#connect-form").wait_for()
        async with page.expect_navigation():
            await page.click("#continue")
        await login_at_issuer(page, self.username, issuer=self.env.iss)
        await page.locator("#outcome").wait_for()

    async def settle(self) -> None:
        await asyncio.gather(*self.tasks)


@contextlib.asynccontextmanager
async def files_server(env: OAuthEnv, client: ServerClientHandle, **options: Any) -> AsyncIterator[ExampleServer]:
    async with example_server(
        env.app.url,
        client.api_key,
        env.iss,
        provider=env.provider,
        scopes=("files:read",),
        files_url=env.oauth.url("/api/files"),
        **options,
    ) as server:
        yield server


@dataclass
class FirstCall:
    """A new person's first ``list_files``, its browser part (connect, sign-in) done."""

    sub: str
    user: BrowserUser
    mcp: Client
    result: CallToolResult


@contextlib.asynccontextmanager
async def first_files_call(
    env: OAuthEnv, client: ServerClientHandle, page: Page, mode: Mode
) -> AsyncIterator[FirstCall]:
    sub, token = new_user(env)
    user = BrowserUser(page, env, sub)
    async with (
        files_server(env, client) as server,
        mcp_client(server.url, token, mode=mode, elicitation_callback=user.callback()) as mcp,
    ):
        result = await mcp.call_tool("list_files", {})
        await user.settle()
        yield FirstCall(sub, user, mcp, result)


@pytest.fixture
async def client(oauth_env: OAuthEnv) -> ServerClientHandle:
    return await new_server_client(oauth_env.app, display_name="Example Files Assistant")


def provider_code_exchanges(env: OAuthEnv) -> int:
    """Token calls elicitd made *as the provider's client* (its browser logins use another client)."""
    return sum(
        1
        for r in env.oauth.token_requests()
        if r.client_id == PROVIDER_CLIENT_ID and r.grant_type == "authorization_code"
    )


def new_user(env: OAuthEnv) -> tuple[str, str]:
    sub = f"u{uuid.uuid4().hex[:10]}"
    return sub, env.oauth.mint(sub, client_id=AUDIENCE)["id_token"]


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_connect_then_use_then_no_more_elicitation(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page, mode: Mode
) -> None:
    async with first_files_call(oauth_env, client, browser_page, mode) as call:
        sub, user, mcp, first = call.sub, call.user, call.mcp, call.result
        assert first.is_error is False, first.content
        assert text_of(first) == FILES
        assert len(user.seen) == 1 and user.seen[0].startswith(oauth_env.app.url + "/f/fl_")
        second = await mcp.call_tool("list_files", {})
        assert text_of(second) == FILES
        assert len(user.seen) == 1  # connected: nobody was asked again
    async with ElicitdClient(oauth_env.app.url, client.api_key) as api:
        issued = await api.token(oauth_env.provider, Subject(oauth_env.iss, sub), scopes=["files:read"])
        assert issued.account == f"acct-{sub}" and "files:read" in issued.scopes
        assert issued.access_token not in repr(issued)
        revoked = await api.revoke(oauth_env.provider, Subject(oauth_env.iss, sub))
        assert len(revoked["revoked"]) == 1
        with pytest.raises(NotConnected) as gone:
            await api.token(oauth_env.provider, Subject(oauth_env.iss, sub))
    assert (gone.value.code, gone.value.status) == ("not_connected", 404)


async def test_retry_before_the_browser_finished(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page
) -> None:
    sub, token = new_user(oauth_env)
    user = BrowserUser(browser_page, oauth_env, sub)
    with round_log() as log:
        async with (
            files_server(oauth_env, client, wait_seconds=0.5) as server,
            mcp_client(
                server.url, token, elicitation_callback=user.callback(when=after_state_only_rounds(log, 1))
            ) as mcp,
        ):
            result = await mcp.call_tool("list_files", {})
            await user.settle()
    assert text_of(result) == FILES
    outcomes = [(r["outcome"], r["state_only"]) for r in log.rounds]
    assert outcomes[-1] == ("completed", False)
    assert ("input_required", True) in outcomes  # the state-only "still pending, retry" rounds
    assert len(outcomes) + 1 <= 10  # within the SDK client's default round cap


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_decline_in_the_client_is_a_normal_result(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page, mode: Mode
) -> None:
    _, token = new_user(oauth_env)
    user = BrowserUser(browser_page, oauth_env, "nobody")
    async with (
        files_server(oauth_env, client) as server,
        mcp_client(
            server.url,
            token,
            mode=mode,
            elicitation_callback=user.callback(action="decline"),
        ) as mcp,
    ):
        result = await mcp.call_tool("list_files", {})
    assert result.is_error is False
    assert text_of(result) == f"You chose not to connect {oauth_env.provider}, so I cannot list your files."


async def test_cancel_then_a_later_call_reuses_the_flow(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page
) -> None:
    sub, token = new_user(oauth_env)
    user = BrowserUser(browser_page, oauth_env, sub)
    async with files_server(oauth_env, client) as server:
        async with mcp_client(server.url, token, elicitation_callback=user.callback(action="cancel")) as mcp:
            dismissed = await mcp.call_tool("list_files", {})
        assert dismissed.is_error is True and "dismissed" in text_of(dismissed)
        async with mcp_client(server.url, token, elicitation_callback=user.callback()) as mcp:
            done = await mcp.call_tool("list_files", {})
        await user.settle()
    assert text_of(done) == FILES
    assert len(user.seen) == 2 and user.seen[0] == user.seen[1]  # the same flow, the same URL


async def test_browser_opened_by_another_user_never_gives_a_token(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page
) -> None:
    sub, token = new_user(oauth_env)
    mallory = BrowserUser(browser_page, oauth_env, f"mallory{uuid.uuid4().hex[:6]}")
    before = provider_code_exchanges(oauth_env)
    async with (
        files_server(oauth_env, client, wait_seconds=0.5, budget_seconds=4) as server,
        mcp_client(server.url, token, elicitation_callback=mallory.callback()) as mcp,
    ):
        result = await mcp.call_tool("list_files", {})
        await mallory.settle()
    assert await browser_page.locator("h1.error").inner_text() == "This link belongs to another account"
    assert result.is_error is True
    assert "Still waiting for you to finish in the browser" in text_of(result)
    assert provider_code_exchanges(oauth_env) == before  # no provider code was ever exchanged
    async with ElicitdClient(oauth_env.app.url, client.api_key) as api:
        with pytest.raises(NotConnected):
            await api.token(oauth_env.provider, Subject(oauth_env.iss, sub))


async def test_client_without_url_capability(oauth_env: OAuthEnv, client: ServerClientHandle) -> None:
    _, token = new_user(oauth_env)
    async with files_server(oauth_env, client) as server, mcp_client(server.url, token) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("list_files", {})
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def _with_webhook(env: OAuthEnv, client: ServerClientHandle, port: int) -> str:
    async with env.app.state.sessions() as session:
        created = await set_webhook(
            session, env.app.state.vault, client.public_id, f"http://127.0.0.1:{port}/elicitd/webhook"
        )
        await session.commit()
    assert created.webhook_secret is not None
    return created.webhook_secret


class Notifications:
    def __init__(self) -> None:
        self.completed: list[str] = []
        self.arrived = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ElicitCompleteNotification):
            self.completed.append(str(message.params.elicitation_id))
            self.arrived.set()


async def test_legacy_push_gets_the_completion_notification_from_the_webhook(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page
) -> None:
    sub, token = new_user(oauth_env)
    user = BrowserUser(browser_page, oauth_env, sub)
    port = free_port()
    secret = await _with_webhook(oauth_env, client, port)
    notes = Notifications()
    async with (
        files_server(oauth_env, client, port=port, webhook_secret=secret) as server,
        mcp_client(
            server.url, token, mode="legacy", elicitation_callback=user.callback(), message_handler=notes
        ) as mcp,
    ):
        await until_verified(oauth_env.app, client.id)  # the example answered elicitd's challenge
        result = await mcp.call_tool("list_files", {})
        await user.settle()
        assert text_of(result) == FILES
        await asyncio.wait_for(notes.arrived.wait(), 15)
    flow_id = user.seen[0].rsplit("/", 1)[1]
    assert notes.completed == [flow_id]


async def test_legacy_error_style_retries_after_the_notification(
    oauth_env: OAuthEnv, client: ServerClientHandle, browser_page: Page
) -> None:
    sub, token = new_user(oauth_env)
    user = BrowserUser(browser_page, oauth_env, sub)
    port = free_port()
    secret = await _with_webhook(oauth_env, client, port)
    notes = Notifications()
    async with (
        files_server(oauth_env, client, port=port, webhook_secret=secret, legacy="error") as server,
        mcp_client(
            server.url, token, mode="legacy", elicitation_callback=user.callback(), message_handler=notes
        ) as mcp,
    ):
        await until_verified(oauth_env.app, client.id)
        with pytest.raises(MCPError) as needed:
            await mcp.call_tool("list_files", {})
        assert needed.value.error.code == -32042
        elicitation = UrlElicitationRequiredError.from_error(needed.value.error).elicitations[0]
        assert elicitation.url.startswith(oauth_env.app.url + "/f/fl_")
        await user.open(elicitation.url)
        await asyncio.wait_for(notes.arrived.wait(), 15)
        assert notes.completed == [elicitation.elicitation_id]
        retried = await mcp.call_tool("list_files", {})
    assert text_of(retried) == FILES
    assert user.seen == []  # nothing was pushed: the -32042 error carried the URL
