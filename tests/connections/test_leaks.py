"""No secret leaves elicitd except the access token through the token endpoint.

Marker strings are planted as the provider's access token, refresh token and authorization code,
and as the provider client secret; after a complete connect flow (and an error or two) none of
them may appear in a log line, an error page or body, a flow event, a flow row, the webhook
outbox, or any API response — except the access token in the token endpoint's answer.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from tests.connections.conftest import (
    Env,
    continue_to_provider,
    get_token,
    new_sub,
    open_connect_page,
    register_provider,
)
from tests.support.apps import LogCapture, ServerClientHandle
from tests.support.browser import login_at_issuer

pytestmark = pytest.mark.browser


async def test_planted_secrets_appear_nowhere(env: Env, client: ServerClientHandle, browser_page: Page) -> None:
    marker = uuid.uuid4().hex[:12]
    access, refresh = f"LEAKAT{marker}", f"LEAKRT{marker}"
    code, secret = f"LEAKCODE{marker}", f"LEAKCS{marker}"
    secrets = {"access token": access, "refresh token": refresh, "code": code, "client secret": secret}
    provider = f"leaky-{marker}"
    await register_provider(env.app, env.oauth, provider, client_id=f"leaky-client-{marker}", secret=secret)
    leak_env = Env(app=env.app, oauth=env.oauth, provider=provider)

    capture = LogCapture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    responses: list[tuple[str, httpx.Response]] = []
    try:
        sub = new_sub("leak")
        async with env.app.http(client.api_key) as http:
            created = await http.post(
                "/v1/flows",
                json={"subject": {"iss": env.iss, "sub": sub}, "kind": "oauth_connect", "provider": provider},
            )
            responses.append(("create", created))
            flow = created.json()["flow"]
            await open_connect_page(browser_page, leak_env, flow["url"], sub)
            # Planted only now, so the issuer login above did not consume the markers.
            env.oauth.plant(access_token=access, refresh_token=refresh, code=code)
            await continue_to_provider(browser_page, leak_env)
            callback_urls: list[str] = []
            browser_page.on("request", lambda r: callback_urls.append(r.url) if "/connect/callback" in r.url else None)
            await login_at_issuer(browser_page, sub, issuer=env.iss)
            await browser_page.locator("#outcome").wait_for()
            pages = [await browser_page.content()]
            assert callback_urls and code in callback_urls[0]  # the code really went through the callback

            # The replayed callback: an error page, which must not echo the code back.
            replay = await browser_page.goto(callback_urls[0])
            assert replay is not None and replay.status == 400
            pages.append(await browser_page.content())

            responses.append(
                (
                    "resolve",
                    await http.post(
                        "/v1/flows/resolve",
                        json={
                            "subject": {"iss": env.iss, "sub": sub},
                            "request_state": created.json()["mcp"]["requestState"],
                            "input_responses": {f"elicitd_{flow['id']}": {"action": "accept"}},
                            "wait_seconds": 5,
                        },
                    ),
                )
            )
            responses.append(("status", await http.get(f"/v1/flows/{flow['id']}")))
            responses.append(
                (
                    "create again",
                    await http.post(
                        "/v1/flows",
                        json={"subject": {"iss": env.iss, "sub": sub}, "kind": "oauth_connect", "provider": provider},
                    ),
                )
            )
            responses.append(
                (
                    "insufficient scope",
                    await http.get(
                        f"/v1/connections/{provider}/token",
                        params={"iss": env.iss, "sub": sub, "scopes": "files:write"},
                    ),
                )
            )
            token = await get_token(leak_env, client, sub)
            responses.append(
                ("revoke", await http.delete(f"/v1/connections/{provider}", params={"iss": env.iss, "sub": sub}))
            )
            responses.append(("token after revoke", await get_token(leak_env, client, sub)))
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)

    assert token.status_code == 200
    assert token.json()["access_token"] == access
    for name in ("refresh token", "code", "client secret"):
        assert secrets[name] not in token.text, name
    assert responses[0][1].status_code == 201 and responses[1][1].json()["outcome"] == "completed"
    assert responses[3][1].json()["status"] == "completed"

    assert capture.lines, "the log capture saw nothing; the test would prove nothing"
    for line in capture.lines:
        for name, value in secrets.items():
            assert value not in line, f"{name} in a log line: {line}"
    for label, response in responses:
        for name, value in secrets.items():
            assert value not in response.text, f"{name} in the {label} response"
    for html in pages:
        for name, value in secrets.items():
            assert value not in html, f"{name} in a page"
    async with env.app.state.sessions() as session:
        stored: list[Any] = [
            *(await session.execute(text("SELECT detail::text FROM flow_events"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(f)::text FROM flows f"))).scalars(),
            *(await session.execute(text("SELECT payload::text FROM webhook_outbox"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(c)::text FROM connections c"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(p)::text FROM providers p"))).scalars(),
            *(await session.execute(text("SELECT row_to_json(s)::text FROM oauth_states s"))).scalars(),
        ]
    assert stored
    for row in stored:
        for name, value in secrets.items():
            # bytea columns print as hex, so look for the hex form of the plaintext too.
            assert value not in row and value.encode().hex() not in row, f"{name} stored in clear: {row[:200]}"
