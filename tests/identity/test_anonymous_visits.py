"""What an anonymous visitor can make elicitd write: one login attempt per browser and page, a
bounded number of new attempts per client address, and no flow event at all."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
from sqlalchemy import text

from service.db.base import FLOW_ID
from service.identity import sessions as store
from service.settings import Settings
from service.signin.throttle import LOGIN_STARTS_PER_MINUTE, WINDOW_SECONDS
from tests.identity.conftest import events, make_flow, new_sub, register_issuer
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.clock import ManualClock
from tests.support.oauth_server import OAuthServer


async def attempts_for(app: RunningApp, path: str) -> int:
    async with app.state.sessions() as session:
        found = await session.execute(text("SELECT count(*) FROM login_attempts WHERE return_to = :p"), {"p": path})
        return int(found.scalar_one())


def state_of(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text
    return httpx.URL(response.headers["location"]).params["state"]


async def test_a_browser_that_comes_back_reuses_its_attempt(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("alice"))
    other = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("alice"))
    path, other_path = f"/f/{FLOW_ID.format(flow.id)}", f"/f/{FLOW_ID.format(other.id)}"
    async with identity_app.http() as browser:  # keeps its cookies, as a browser does
        states = {state_of(await browser.get(path)) for _ in range(5)}
        switching = await browser.get("/auth/login", params={"return_to": path, "switch": "true"})
        other_state = state_of(await browser.get(other_path))
    assert len(states) == 1
    assert state_of(switching) in states  # the same attempt, now asking the issuer to prompt
    assert httpx.URL(switching.headers["location"]).params["prompt"] == "login"
    assert other_state not in states  # another page is another attempt
    assert await attempts_for(identity_app, path) == 1
    assert await attempts_for(identity_app, other_path) == 1
    # Anonymous visits wrote no flow event.
    assert [e["type"] for e in await events(identity_app, flow.id)] == ["created"]


async def test_the_reused_attempt_still_completes_a_sign_in(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    alice = new_sub("alice")
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=alice)
    path = f"/f/{FLOW_ID.format(flow.id)}"
    async with identity_app.http() as browser:
        first = await browser.get(path)
        again = await browser.get(path)
        assert state_of(first) == state_of(again)
        back = issuer_server.login_without_browser(again.headers["location"], alice)
        done = await browser.get(str(back))
        assert done.status_code == 303
        assert done.headers["location"] == path
        page = await browser.get(path)
    assert page.status_code == 200
    assert f"{issuer_server.issuer} {alice}" in page.text


async def test_new_attempts_are_limited_per_address(
    make_settings: Callable[..., Settings], issuer_server: OAuthServer
) -> None:
    clock = ManualClock()
    async with running_app(make_settings(), clock=clock) as app:
        await register_issuer(app, issuer_server)
        client = await new_server_client(app)
        flow = await make_flow(app, client, iss=issuer_server.issuer, sub=new_sub("bob"))
        path = f"/f/{FLOW_ID.format(flow.id)}"
        answers = []
        for _ in range(LOGIN_STARTS_PER_MINUTE + 3):
            async with app.http() as script:  # no cookies kept: every visit is a stranger
                answers.append(await script.get(path))
        assert [r.status_code for r in answers] == [303] * LOGIN_STARTS_PER_MINUTE + [429] * 3
        refused = answers[-1]
        assert refused.headers["retry-after"] == str(int(WINDOW_SECONDS))
        assert "text/html" in refused.headers["content-type"]
        assert await attempts_for(app, path) == LOGIN_STARTS_PER_MINUTE
        clock.advance(WINDOW_SECONDS)
        async with app.http() as script:
            assert (await script.get(path)).status_code == 303
        assert [e["type"] for e in await events(app, flow.id)] == ["created"]


async def test_a_flow_of_an_unknown_issuer_gets_no_event_per_visit(
    identity_app: RunningApp, client: ServerClientHandle
) -> None:
    flow = await make_flow(identity_app, client, iss=f"https://unknown-{uuid.uuid4().hex[:6]}.example", sub="u-1")
    async with identity_app.http() as http:
        for _ in range(5):
            response = await http.get(f"/f/{FLOW_ID.format(flow.id)}")
            assert response.status_code == 403
    assert [e["type"] for e in await events(identity_app, flow.id)] == ["created"]


async def test_attempts_written_before_states_were_sealed_are_not_reused(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    """Rows sealed without the state (older versions) cannot be resumed: a new attempt is made."""
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("eve"))
    path = f"/f/{FLOW_ID.format(flow.id)}"
    resolved = await identity_app.state.issuers.resolve(issuer_server.issuer)
    assert resolved is not None
    binding = store.new_token()
    async with identity_app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO login_attempts (id, issuer_id, browser_binding, secrets_enc, secrets_key_id, return_to, "
                "expires_at) VALUES (:id, :issuer, :binding, :blob, :kid, :path, now() + interval '10 minutes')"
            ),
            {
                "id": store.digest("old-state"),
                "issuer": resolved.id,
                "binding": store.digest(binding),
                "blob": b"not sealed",
                "kid": "test2",
                "path": path,
            },
        )
        await session.commit()
    async with identity_app.http(cookies={store.LOGIN_COOKIE: binding}) as browser:
        response = await browser.get(path)
    assert state_of(response) != "old-state"
    assert await attempts_for(identity_app, path) == 2
