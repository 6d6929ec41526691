"""Connection health and proactive refresh, on the real OAuth test server and real PostgreSQL.

A refresh pass (``service.connections.refresher``) refreshes tokens nearing expiry with no server
asking, exactly once when two passes race; a provider refusing the grant (``invalid_grant``) makes
the authorization ``needs_reauthorization`` with the reason, once, with one
``connection.needs_reauthorization`` event on each grantee's stream and webhook outbox; a 5xx
storm marks nothing; a refresh token nearing its own end (``refresh_token_expires_in``) makes it
``expiring`` and a refresh that extends it makes it ``recovered``. The admin view and ``/metrics``
show the health; a reconnect in place as another provider account is refused and changes nothing.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.admin import clients
from service.admin.connections import show_connection
from service.connections import authorizations as authz
from service.connections.errors import AccountMismatch
from service.connections.refresher import Refresher, RefreshSettings
from service.db.base import CONNECTION_ID
from service.db.unit import unit_of_work
from service.errors import InvalidRequest
from tests.admin.conftest import answered_challenge
from tests.connections.conftest import (
    PROVIDER_CLIENT_ID,
    Env,
    connection_rows,
    continue_to_provider,
    create_flow,
    flow_row,
    get_token,
    grant,
    new_sub,
    open_connect_page,
    plant_connection,
    provider_token_calls,
)
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.browser import login_at_issuer
from tests.support.factories import token_set


def refresher(env: Env) -> Refresher:
    # A batch larger than what other tests leave behind in the shared database.
    return Refresher(env.app.state.connections, RefreshSettings(batch_size=5000))


async def set_columns(env: Env, connection_ref: str, assignments: str) -> None:
    async with env.app.state.sessions() as session:
        await session.execute(
            text(f"UPDATE authorizations SET {assignments} WHERE 'cn_' || replace(id::text, '-', '') = :c"),
            {"c": connection_ref},
        )
        await session.commit()


async def stream_events(env: Env, client: ServerClientHandle) -> list[tuple[str, dict[str, Any]]]:
    async with env.app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, payload FROM events WHERE server_client_id = :c AND type LIKE 'connection.%' ORDER BY seq"
            ),
            {"c": client.id},
        )
        return [(r[0], r[1]) for r in rows]


async def test_a_pass_refreshes_ahead_of_expiry_exactly_once(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    before = provider_token_calls(env.oauth, "refresh_token")

    await asyncio.gather(refresher(env).run_once(), refresher(env).run_once())

    assert provider_token_calls(env.oauth, "refresh_token") - before == 1
    (row,) = await connection_rows(env.app, sub)
    assert row["status"] == "active"
    assert row["health"] == "healthy"
    assert row["refresh_claim"] is None
    assert row["refreshed_at"] is not None
    assert row["checked_at"] is not None
    assert row["expires_at"] > datetime.now(UTC) + timedelta(minutes=50)
    assert await stream_events(env, client) == []  # healthy before and after: nothing to tell


async def test_provider_refusal_marks_needs_reauthorization_once_with_events(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    async with env.app.state.sessions() as session:
        await session.execute(
            text("UPDATE server_clients SET webhook_url = 'http://127.0.0.1:9/hook' WHERE id = :c"), {"c": client.id}
        )
        await session.commit()
    await answered_challenge(env.app, client.id)
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    env.oauth.fail_next_refresh("invalid_grant")

    await refresher(env).run_once()
    await refresher(env).run_once()  # already marked: no second change, no second event

    (row,) = await connection_rows(env.app, sub)
    assert (row["status"], row["health"]) == ("reauthorization_required", "needs_reauthorization")
    assert (row["health_reason"], row["health_http_status"]) == ("invalid_grant", 400)
    assert row["access_token_enc"] is None and row["refresh_token_enc"] is None
    events = await stream_events(env, client)
    assert [kind for kind, _ in events] == ["connection.needs_reauthorization"]
    payload = events[0][1]
    assert payload["connection_id"] == ref
    assert (payload["provider"], payload["status"], payload["reason"]) == (
        env.provider,
        "needs_reauthorization",
        "invalid_grant",
    )
    assert "token" not in str(payload).replace("refresh_token", "").replace("access_token", "")
    async with env.app.state.sessions() as session:
        queued = (
            await session.execute(
                text("SELECT event_type, flow_id FROM webhook_outbox WHERE server_client_id = :c"), {"c": client.id}
            )
        ).all()
        view = await show_connection(session, ref)
    assert [(q[0], q[1]) for q in queued] == [("connection.needs_reauthorization", None)]
    assert (view.health, view.health_reason, view.health_http_status) == (
        "needs_reauthorization",
        "invalid_grant",
        400,
    )
    assert view.authorizations is not None
    assert [a.health for a in view.authorizations] == ["needs_reauthorization"]

    async with env.app.http() as http:
        metrics = (await http.get("/metrics")).text
    assert f'elicitd_connections{{health="needs_reauthorization",provider="{env.provider}"}} 1.0' in metrics
    assert sub not in metrics


async def test_a_provider_5xx_storm_marks_nothing(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    env.oauth.fail_next_refresh("server_error", status=503, count=3)

    for _ in range(3):
        await refresher(env).run_once()

    (row,) = await connection_rows(env.app, sub)
    assert (row["status"], row["health"], row["health_reason"]) == ("active", "healthy", None)
    assert row["refresh_claim"] is None
    assert row["access_token_enc"] is not None
    assert await stream_events(env, client) == []
    await set_columns(env, ref, "expires_at = now() + interval '1 hour'")  # not due for the next tests


async def test_a_pass_keeps_to_the_provider_rate(env: Env, client: ServerClientHandle) -> None:
    subs = [new_sub("wave") for _ in range(6)]
    for sub in subs:
        ref, _ = await plant_connection(env, sub, granted_to=client)
        await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    seen = len(env.oauth.token_requests())
    paced = Refresher(env.app.state.connections, RefreshSettings(batch_size=5000, concurrency=4, provider_rate=4.0))

    outcome = await paced.run_once()

    assert outcome.outcomes.get("refreshed", 0) >= len(subs)
    for sub in subs:
        (row,) = await connection_rows(env.app, sub)
        assert row["refreshed_at"] is not None
    starts = sorted(
        r.started_at
        for r in env.oauth.token_requests()[seen:]
        if r.grant_type == "refresh_token" and r.client_id == PROVIDER_CLIENT_ID
    )
    assert len(starts) >= len(subs)
    # 4 a second: six calls span at least 1.25 s (unpaced they all start within ~50 ms), and no
    # second of them sees more than 4 (+1 for the provider's own jitter in noting the start).
    assert starts[-1] - starts[0] >= 1.1, starts
    assert max(sum(1 for t in starts if first <= t < first + 1.0) for first in starts) <= 5, starts


async def test_refresh_token_end_makes_expiring_then_recovered_then_needs_reauthorization(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await set_columns(env, ref, "refresh_expires_at = now() + interval '1 day'")
    calls = provider_token_calls(env.oauth, "refresh_token")

    await refresher(env).run_once()

    (row,) = await connection_rows(env.app, sub)
    assert (row["health"], row["health_reason"]) == ("expiring", "refresh_token_expiring")
    assert provider_token_calls(env.oauth, "refresh_token") == calls  # known without asking
    assert [kind for kind, _ in await stream_events(env, client)] == ["connection.expiring"]

    # The provider answers a refresh with a new refresh token good for 30 days (GitHub's field).
    env.oauth.configure(refresh_token_ttl=30 * 86400)
    try:
        await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
        await refresher(env).run_once()
    finally:
        env.oauth.configure(refresh_token_ttl=None)
    (row,) = await connection_rows(env.app, sub)
    assert (row["health"], row["health_reason"]) == ("healthy", None)
    assert row["refresh_expires_at"] > datetime.now(UTC) + timedelta(days=29)
    kinds = [kind for kind, _ in await stream_events(env, client)]
    assert kinds == ["connection.expiring", "connection.recovered"]

    await set_columns(env, ref, "refresh_expires_at = now() - interval '1 second'")
    calls = provider_token_calls(env.oauth, "refresh_token")
    await refresher(env).run_once()
    (row,) = await connection_rows(env.app, sub)
    assert (row["status"], row["health"], row["health_reason"]) == (
        "reauthorization_required",
        "needs_reauthorization",
        "refresh_token_expired",
    )
    assert provider_token_calls(env.oauth, "refresh_token") == calls
    kinds = [kind for kind, _ in await stream_events(env, client)]
    assert kinds == ["connection.expiring", "connection.recovered", "connection.needs_reauthorization"]


async def test_reconnect_in_place_recovers_the_same_authorization(env: Env, client: ServerClientHandle) -> None:
    """What the callback of a reconnect flow stores (``ConnectService._exchange``): the same
    authorization and connection ids, healthy again, with ``connection.recovered``; another
    provider account is refused and changes nothing."""
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    connection_id = CONNECTION_ID.parse(ref)
    assert connection_id is not None
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    env.oauth.fail_next_refresh("invalid_grant")
    await refresher(env).run_once()
    service = env.app.state.connections
    provider = await service.provider(env.provider)

    async def reconnect_as(login: str) -> Any:
        """The reconnect callback's store of ``login``'s fresh tokens, in place."""
        minted = env.oauth.mint(login, client_id="elicitd-files", scope="files:read")
        async with unit_of_work(env.app.state.sessions) as session:
            return await service.store_authorization(
                session,
                iss=env.iss,
                sub=sub,
                provider=provider,
                tokens=token_set(minted["access_token"], minted["refresh_token"], raw=minted),
                account_id=env.oauth.account_id(login),
                account_login=login,
                requested=["files:read"],
                reconnect=connection_id,
                in_place=connection_id,
            )

    with pytest.raises(AccountMismatch):  # another account is refused
        await reconnect_as(new_sub("other"))
    (row,) = await connection_rows(env.app, sub)
    assert (row["id"], row["health"]) == (connection_id, "needs_reauthorization")

    done = await reconnect_as(sub)
    assert (done.connection.id, done.authorization.id) == (connection_id, connection_id)
    assert done.told == [client.id]
    (row,) = await connection_rows(env.app, sub)
    assert (row["status"], row["health"], row["health_reason"]) == ("active", "healthy", None)
    kinds = [kind for kind, _ in await stream_events(env, client)]
    assert kinds == ["connection.needs_reauthorization", "connection.recovered"]
    async with env.app.state.sessions() as session:
        view = await show_connection(session, ref)
        live = await authz.live_of_connections(session, [connection_id])
    assert (view.status, view.health) == ("active", "healthy")
    assert [a.id for a in live] == [connection_id]


@pytest.mark.browser
async def test_reconnect_in_browser_refuses_another_account_then_recovers(
    env: Env, client: ServerClientHandle, browser_page: Page
) -> None:
    """Through Chromium: a provider that dropped the grant, a reconnect flow answered for another
    provider account (refused, nothing replaced), then for the same one (same ids, healthy,
    ``connection.recovered``)."""
    sub = new_sub("again")
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    env.oauth.fail_next_refresh("invalid_grant")
    await refresher(env).run_once()
    (marked,) = await connection_rows(env.app, sub)
    assert marked["health"] == "needs_reauthorization"
    flow = (await create_flow(env, client, sub))["flow"]

    await open_connect_page(browser_page, env, flow["url"], sub)
    await continue_to_provider(browser_page, env)
    await login_at_issuer(browser_page, new_sub("stranger"), issuer=env.iss)  # at the provider
    await browser_page.wait_for_load_state()
    assert "another account" in await browser_page.inner_text("h1")
    (after,) = await connection_rows(env.app, sub)
    assert (after["id"], after["status"], after["health"]) == (
        marked["id"],
        "reauthorization_required",
        marked["health"],
    )
    assert (await flow_row(env.app, flow["id"]))["status"] == "pending"

    # The same link again, signed in to elicitd already: this time as the account connected before.
    await browser_page.goto(flow["url"])
    await browser_page.locator("#connect-form").wait_for()
    await continue_to_provider(browser_page, env)
    await login_at_issuer(browser_page, sub, issuer=env.iss)
    await browser_page.locator("#outcome").wait_for()
    assert await browser_page.inner_text("#outcome") == "Connected"
    (row,) = await connection_rows(env.app, sub)
    assert (row["id"], row["status"], row["health"], row["health_reason"]) == (marked["id"], "active", "healthy", None)
    assert (await flow_row(env.app, flow["id"]))["result"]["connection_id"] == ref
    kinds = [kind for kind, _ in await stream_events(env, client)]
    assert kinds == ["connection.needs_reauthorization", "connection.recovered"]
    token = await get_token(env, client, sub)
    assert (token.status_code, token.json()["connection_id"]) == (200, ref)


async def test_a_webhook_receives_only_the_event_types_it_subscribed_to(env: Env, client: ServerClientHandle) -> None:
    """Two servers share one authorization; A's webhook takes only ``connection.needs_reauthorization``,
    B's only ``flow.completed``. The provider drops the grant: A's webhook gets it, B's does not
    (B's stream still does); B's external flow completes: B's webhook gets it, A's does not."""
    sub = new_sub("subs")
    ref, _ = await plant_connection(env, sub, granted_to=client)
    other = await new_server_client(env.app)
    await grant(env.app, ref, other, ["files:read"])
    async with unit_of_work(env.app.state.sessions) as session:
        await clients.set_webhook(
            session, env.app.state.vault, client.public_id, "http://127.0.0.1:9/a", ["connection.needs_reauthorization"]
        )
        await clients.set_webhook(
            session, env.app.state.vault, other.public_id, "http://127.0.0.1:9/b", ["flow.completed"]
        )
    for hooked in (client, other):
        await answered_challenge(env.app, hooked.id)
    async with env.app.state.sessions() as session:
        with pytest.raises(InvalidRequest) as refused:
            await clients.set_webhook(
                session, env.app.state.vault, other.public_id, "http://127.0.0.1:9/b", ["flow.nope"]
            )
    assert (refused.value.problem_code, refused.value.extra["unknown"]) == ("invalid_webhook_events", ["flow.nope"])
    await set_columns(env, ref, "expires_at = now() + interval '2 minutes'")
    env.oauth.fail_next_refresh("invalid_grant")
    await refresher(env).run_once()
    async with env.app.http(other.api_key) as http:
        created = await http.post(
            "/v1/flows",
            json={"subject": {"iss": env.iss, "sub": sub}, "kind": "external", "url": "https://app.example.com/step"},
        )
        flow_id = created.json()["flow"]["id"]
        done = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
    assert done.status_code == 200, done.text

    async def queued(handle: ServerClientHandle) -> list[str]:
        async with env.app.state.sessions() as session:
            rows = await session.execute(
                text("SELECT event_type FROM webhook_outbox WHERE server_client_id = :c ORDER BY created_at"),
                {"c": handle.id},
            )
            return [r[0] for r in rows]

    assert await queued(client) == ["connection.needs_reauthorization"]
    assert await queued(other) == ["flow.completed"]
    assert [kind for kind, _ in await stream_events(env, other)] == ["connection.needs_reauthorization"]


async def test_the_token_endpoint_tells_grantees_once_when_the_provider_refuses(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub("ask")
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await set_columns(env, ref, "expires_at = now() + interval '5 seconds'")
    env.oauth.fail_next_refresh("invalid_grant")

    first, again = await get_token(env, client, sub), await get_token(env, client, sub)

    assert [r.json()["code"] for r in (first, again)] == ["reauthorization_required"] * 2
    events = await stream_events(env, client)
    assert [(kind, data["reason"], data["connection_id"]) for kind, data in events] == [
        ("connection.needs_reauthorization", "invalid_grant", ref)
    ]


async def test_a_reconnect_flow_names_the_connection_and_only_its_grantee_may(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub("named")
    ref, _ = await plant_connection(env, sub, granted_to=client)

    created = await create_flow(env, client, sub, scopes=["files:read"], reconnect=ref)

    assert created["status"] == "pending"  # asked by name: a provider trip even while it works
    row = await flow_row(env.app, created["flow"]["id"])
    assert "cn_" + row["connection_id"].hex == ref
    unknown = await create_flow(env, client, sub, reconnect="cn_" + "0" * 32, expect=404)
    stranger = await new_server_client(env.app)
    ungranted = await create_flow(env, stranger, sub, reconnect=ref, expect=404)
    assert unknown["code"] == ungranted["code"] == "not_connected"
    assert unknown == ungranted  # a connection this client was not granted is exactly as absent
