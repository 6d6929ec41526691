"""The TypeScript client (clients/typescript): installed from its lockfile, compiled with strict
TypeScript and tested with Node's test runner — unit tests, and end-to-end tests where a real MCP
server on the official TypeScript SDK uses the package against this elicitd, the test OAuth server
and Chromium (which this test drives when the TypeScript tests ask it to open a link)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Browser

from service.admin.clients import set_webhook
from tests.mcp.conftest import OAuthEnv
from tests.mcp.test_mcp_oauth import BrowserUser
from tests.support.apps import free_port, new_server_client
from tests.support.browser import new_context
from tests.support.serving import InProcessServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
AUDIENCE = "https://files-assistant.test/mcp"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@contextlib.asynccontextmanager
async def browser_service(browser: Browser, env: OAuthEnv) -> AsyncIterator[tuple[str, list[BaseException]]]:
    """``POST /open {"url", "user"}``: a person opens the link in a browser of their own and signs
    in (at the issuer, then at the provider); answered at once, the browsing goes on meanwhile."""
    tasks: list[asyncio.Task[None]] = []
    failures: list[BaseException] = []

    async def browse(url: str, user: str) -> None:
        context = await new_context(browser)
        try:
            await BrowserUser(await context.new_page(), env, user).open(url)
        except BaseException as exc:  # reported by the test, not lost in a task
            failures.append(exc)
            raise
        finally:
            await context.close()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        asked = json.loads(body or b"{}")
        tasks.append(asyncio.get_running_loop().create_task(browse(str(asked["url"]), str(asked["user"]))))
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    port = free_port()
    server = InProcessServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    task = await server.start()
    try:
        yield f"http://127.0.0.1:{port}", failures
    finally:
        server.should_exit = True
        for pending in tasks:
            pending.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
            await task


async def run(*command: str, env: dict[str, str], log: Path) -> int:
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(*command, cwd=PACKAGE, env=env, stdout=out, stderr=out)
        return await asyncio.wait_for(process.wait(), 600)


@pytest.mark.timeout(900)
async def test_the_typescript_package_end_to_end(
    oauth_env: OAuthEnv, chromium_browser: Browser, tmp_path: Path
) -> None:
    npm = shutil.which("npm")
    assert npm is not None, "Node.js 20+ with npm is needed for the TypeScript client's tests"
    client = await new_server_client(
        oauth_env.app, display_name="TypeScript Files Assistant", subject_proof="required", resource_uris=[AUDIENCE]
    )
    async with oauth_env.app.state.sessions() as session:
        # A webhook address nobody listens on: the secret is what stream events are signed with.
        hooked = await set_webhook(session, oauth_env.app.state.vault, client.public_id, "http://127.0.0.1:9/hook")
        await session.commit()
    assert hooked.webhook_secret is not None
    log = tmp_path / "npm.log"
    async with browser_service(chromium_browser, oauth_env) as (browser_url, failures):
        env = {
            **os.environ,
            "ELICITD_URL": oauth_env.app.url,
            "ELICITD_API_KEY": client.api_key,
            "TEST_ISSUER": oauth_env.iss,
            "TEST_PROVIDER": oauth_env.provider,
            "TEST_FILES_URL": oauth_env.oauth.url("/api/files"),
            "TEST_AUDIENCE": AUDIENCE,
            "TEST_BROWSER_URL": browser_url,
            "TEST_WEBHOOK_SECRET": hooked.webhook_secret,
            "NO_COLOR": "1",
        }
        installed = await run(npm, "ci", "--no-audit", "--no-fund", env=env, log=log)
        assert installed == 0, log.read_text()[-4000:]
        tested = await run(npm, "test", env=env, log=log)
    output = log.read_text()
    assert failures == []
    assert tested == 0, output[-6000:]
    passed = re.search(r"^# pass (\d+)$", output, re.M)
    assert passed is not None and int(passed.group(1)) >= 14, output[-3000:]
    assert re.search(r"^# fail 0$", output, re.M) and re.search(r"^# skipped 0$", output, re.M), output[-3000:]
