"""The token endpoint, refresh under concurrency, reauthorization, incremental scopes, several
accounts and revocation — against the real OAuth server process."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Page
from sqlalchemy import text

from tests.connections.conftest import (
    PROVIDER_CLIENT_ID,
    Env,
    accepted_by_provider,
    connect_in_browser,
    connection_rows,
    create_flow,
    expire_soon,
    flow_row,
    get_token,
    new_sub,
    plant_connection,
    provider_token_calls,
)
from tests.support.apps import ServerClientHandle, new_server_client, running_app


async def test_fresh_token_is_returned_without_refresh(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("fresh")
    connection, minted = await plant_connection(env, sub, granted_to=client)
    calls = provider_token_calls(env.oauth, "refresh_token")
    response = await get_token(env, client, sub)
    assert response.status_code == 200
    body = response.json()
    assert body["access_token"] == minted["access_token"]
    assert body["connection_id"] == connection
    assert body["account_id"] == env.oauth.account_id(sub)
    assert body["scopes"] == ["files:read"]
    assert "refresh_token" not in body
    assert provider_token_calls(env.oauth, "refresh_token") == calls


async def test_twenty_concurrent_requests_on_two_instances_refresh_once(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("burst")
    connection, minted = await plant_connection(
        env, sub, granted_to=client, expires_in=5
    )  # inside the 60 s refresh margin
    calls = provider_token_calls(env.oauth, "refresh_token")
    env.oauth.set_token_delay(0.5)  # the refresh is slow, so the other 19 requests pile up behind it
    try:
        async with running_app(env.app.settings, keep_public_url=True) as second:
            responses = await asyncio.gather(
                *(get_token(env, client, sub, app=env.app if i % 2 else second) for i in range(20))
            )
    finally:
        env.oauth.set_token_delay(0)
    assert [r.status_code for r in responses] == [200] * 20
    tokens = {r.json()["access_token"] for r in responses}
    assert len(tokens) == 1
    (token,) = tokens
    assert token != minted["access_token"]
    assert provider_token_calls(env.oauth, "refresh_token") == calls + 1
    assert accepted_by_provider(env, token)
    assert {r.json()["connection_id"] for r in responses} == {connection}


async def test_rotating_refresh_token_is_never_reused(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("rotor")
    connection, _ = await plant_connection(env, sub, granted_to=client)
    for _ in range(3):
        await expire_soon(env, connection)
        responses = await asyncio.gather(*(get_token(env, client, sub) for _ in range(5)))
        assert [r.status_code for r in responses] == [200] * 5
    refresh_tokens = env.oauth.tokens(kind="refresh", sub=sub)
    statuses = sorted(t.status for t in refresh_tokens)
    # Four refresh tokens in one family: three used exactly once (each replaced), one active,
    # none revoked — a reuse would have revoked the whole family.
    assert statuses == ["active", "used", "used", "used"]
    ours = [
        r for r in env.oauth.token_requests() if r.grant_type == "refresh_token" and r.client_id == PROVIDER_CLIENT_ID
    ]
    assert all(r.outcome == "ok" for r in ours)
    final = (await get_token(env, client, sub)).json()["access_token"]
    assert accepted_by_provider(env, final)


async def test_invalid_grant_requires_reauthorization_and_a_reconnect_flow(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub("gone")
    connection, _ = await plant_connection(env, sub, granted_to=client)
    await expire_soon(env, connection)
    env.oauth.fail_next_refresh("invalid_grant")
    first = await get_token(env, client, sub)
    assert first.status_code == 409
    assert first.json()["code"] == "reauthorization_required"
    assert first.json()["connection_id"] == connection
    calls = provider_token_calls(env.oauth, "refresh_token")
    again = await get_token(env, client, sub)
    assert again.status_code == 409  # answered locally: the provider is not asked again
    assert provider_token_calls(env.oauth, "refresh_token") == calls
    rows = await connection_rows(env.app, sub)
    assert [(r["status"], r["access_token_enc"], r["refresh_token_enc"]) for r in rows] == [
        ("reauthorization_required", None, None)
    ]
    created = await create_flow(env, client, sub, scopes=["files:read"])
    assert created["status"] == "pending"
    row = await flow_row(env.app, created["flow"]["id"])
    assert "cn_" + row["connection_id"].hex == connection


async def test_more_scopes_start_a_flow_for_the_union(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("grow")
    connection, _ = await plant_connection(env, sub, granted_to=client)
    lacking = await get_token(env, client, sub, scopes="files:read files:write")
    assert lacking.status_code == 409
    assert (lacking.json()["code"], lacking.json()["missing"]) == ("insufficient_scope", ["files:write"])
    created = await create_flow(env, client, sub, scopes=["files:write"])
    assert created["flow"]["scopes"] == ["files:read", "files:write"]
    row = await flow_row(env.app, created["flow"]["id"])
    assert "cn_" + row["connection_id"].hex == connection
    covered = await create_flow(env, client, sub, scopes=["files:read"], expect=200)
    assert covered["status"] == "completed"


async def test_several_accounts_told_apart_by_account_id(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("multi")
    work, work_tokens = await plant_connection(env, sub, granted_to=client, provider_user=f"{sub}-work")
    home, home_tokens = await plant_connection(env, sub, granted_to=client, provider_user=f"{sub}-home")
    assert work != home
    got = await get_token(env, client, sub, account=env.oauth.account_id(f"{sub}-home"))
    assert got.json()["access_token"] == home_tokens["access_token"]
    got = await get_token(env, client, sub, account=env.oauth.account_id(f"{sub}-work"))
    assert got.json()["access_token"] == work_tokens["access_token"]
    satisfied = await create_flow(env, client, sub, account=env.oauth.account_id(f"{sub}-work"), expect=200)
    assert satisfied["result"]["connection_id"] == work
    unknown = await create_flow(env, client, sub, account="acct-nobody", expect=201)
    assert unknown["status"] == "pending"


async def test_revoke_at_provider_and_locally(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("bye")
    connection, minted = await plant_connection(env, sub, granted_to=client)
    revocations = len(env.oauth.revocations())
    async with env.app.http(client.api_key) as http:
        response = await http.delete(f"/v1/connections/{env.provider}", params={"iss": env.iss, "sub": sub})
    assert response.status_code == 200
    assert response.json() == {"revoked": [connection], "revoked_at_provider": True, "grants_revoked": []}
    assert len(env.oauth.revocations()) == revocations + 1
    assert not accepted_by_provider(env, minted["access_token"])
    assert (await get_token(env, client, sub)).status_code == 404
    rows = await connection_rows(env.app, sub)
    assert [(r["status"], r["access_token_enc"], r["refresh_token_enc"]) for r in rows] == [("revoked", None, None)]
    async with env.app.http(client.api_key) as http:
        missing = await http.delete(f"/v1/connections/{env.provider}", params={"iss": env.iss, "sub": sub})
    assert missing.status_code == 404 and missing.json()["code"] == "not_connected"


async def test_access_rules(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub("rules")
    await plant_connection(env, sub, granted_to=client)
    nobody = await get_token(env, client, new_sub("nobody"))
    assert (nobody.status_code, nobody.json()["code"]) == (404, "not_connected")
    other = await new_server_client(env.app, allowed_providers=["github"])
    refused = await get_token(env, other, sub)
    assert (refused.status_code, refused.json()["code"]) == (403, "provider_not_allowed")
    async with env.app.http(client.api_key) as http:
        unknown = await http.post(
            "/v1/flows", json={"subject": {"iss": env.iss, "sub": sub}, "kind": "oauth_connect", "provider": "no-such"}
        )
        bad = await http.get("/v1/connections/NOT_VALID/token", params={"iss": env.iss, "sub": sub})
        unauth = await env.app.http().get(f"/v1/connections/{env.provider}/token", params={"iss": env.iss, "sub": sub})
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_provider")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_request")
    assert unauth.status_code == 401
    # Another server client, allowed the provider but never granted this connection, is told exactly
    # what it would be told if nobody had connected (tests/grants has the whole story).
    stranger = await new_server_client(env.app)
    unseen, absent = await get_token(env, stranger, sub), await get_token(env, stranger, new_sub("nobody"))
    assert (unseen.status_code, unseen.json()["code"]) == (404, "not_connected")
    assert unseen.content == absent.content


@pytest.mark.browser
async def test_reconnect_in_browser_keeps_the_connection_id(
    env: Env, client: ServerClientHandle, browser_page: Page
) -> None:
    sub = new_sub("back")
    connection, _ = await plant_connection(env, sub, granted_to=client)
    await expire_soon(env, connection)
    env.oauth.fail_next_refresh("invalid_grant")
    assert (await get_token(env, client, sub)).status_code == 409
    flow = (await create_flow(env, client, sub))["flow"]
    await connect_in_browser(browser_page, env, flow["url"], sub)
    assert await browser_page.inner_text("#outcome") == "Connected"
    row = await flow_row(env.app, flow["id"])
    assert row["status"] == "completed"
    assert row["result"]["connection_id"] == connection
    token = await get_token(env, client, sub)
    assert token.status_code == 200
    assert token.json()["connection_id"] == connection
    assert accepted_by_provider(env, token.json()["access_token"])


async def test_an_unreadable_stored_token_asks_for_reconnection_not_a_500(env: Env, client: ServerClientHandle) -> None:
    """A ciphertext moved from another connection's row does not open here (owner is bound)."""
    sub, other = new_sub("moved"), new_sub("donor")
    connection, minted = await plant_connection(env, sub, granted_to=client)
    await plant_connection(env, other, granted_to=client)
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "UPDATE authorizations SET access_token_enc = (SELECT access_token_enc FROM authorizations "
                "WHERE subject_sub = :other) WHERE subject_sub = :sub"
            ),
            {"other": other, "sub": sub},
        )
        await session.commit()
    response = await get_token(env, client, sub)
    assert response.status_code == 409
    assert response.json()["code"] == "reauthorization_required"
    assert response.json()["connection_id"] == connection
    assert minted["access_token"] not in response.text
