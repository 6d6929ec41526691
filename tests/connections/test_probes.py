"""Health probes (``service.connections.probes``) on the real OAuth test server and real PostgreSQL.

The provider's account endpoint (``/api/me``) is called with each due connection's access token:
a grant revoked at the provider makes the connection ``needs_reauthorization`` within one pass,
with one event on each grantee's stream and webhook outbox; an answer for another account does
too (``account_changed``); a 5xx storm, a rate limit or a timeout marks nothing and rests the
provider; two replicas' passes probe each connection exactly once; a connection just checked is
not probed again within the interval.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from service.connections.probes import Prober, ProbeSettings
from tests.admin.conftest import answered_challenge
from tests.connections.conftest import (
    PROVIDER_CLIENT_ID,
    Env,
    connection_rows,
    grant,
    new_sub,
    plant_connection,
    provider_token_calls,
)
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.clock import ManualClock
from tests.support.factories import store_connection, token_set


def prober(env: Env, clock: ManualClock | None = None, **settings: Any) -> Prober:
    # A batch larger than what other tests leave behind in the shared database.
    return Prober(
        env.app.state.connections, ProbeSettings(batch_size=5000, interval_seconds=3600.0, **settings), clock=clock
    )


async def make_due(env: Env, connection_ref: str) -> None:
    """Last checked two hours ago: due for a probe at a one-hour interval."""
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "UPDATE authorizations SET checked_at = now() - interval '2 hours' "
                "WHERE 'cn_' || replace(connection_id::text, '-', '') = :c"
            ),
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


def probe_calls(env: Env) -> int:
    return env.oauth.stats().api_calls.get("/api/me", 0)


async def test_a_grant_revoked_at_the_provider_needs_reauthorization_after_one_pass(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub()
    ref, minted = await plant_connection(env, sub, granted_to=client)
    other = await new_server_client(env.app, display_name="Acme Calendar")
    await grant(env.app, ref, other, ["files:read"])  # a second server shares the authorization
    async with env.app.state.sessions() as session:
        await session.execute(
            # Webhooks (their secret never opened here: nothing is delivered to port 9).
            text(
                "UPDATE server_clients SET webhook_url = 'http://127.0.0.1:9/hook', webhook_secret_enc = '\\x00', "
                "webhook_secret_key_id = 'k' WHERE id = ANY(:c)"
            ),
            {"c": [client.id, other.id]},
        )
        await session.commit()
    for hooked in (client, other):
        await answered_challenge(env.app, hooked.id)  # verified once; nothing answers on port 9 now
    await make_due(env, ref)
    env.oauth.revoke_grant(minted["access_token"])  # the user removed the app at the provider
    refreshes = provider_token_calls(env.oauth, "refresh_token")

    first = await prober(env).run_once()
    second = await prober(env).run_once()  # already marked: not probed, nothing told again

    assert first.outcomes.get("needs_reauthorization") == 1
    assert provider_token_calls(env.oauth, "refresh_token") - refreshes == 1  # the refresh token decided
    (row,) = await connection_rows(env.app, sub)
    assert (row["status"], row["health"]) == ("reauthorization_required", "needs_reauthorization")
    assert (row["health_reason"], row["health_http_status"]) == ("invalid_grant", 400)
    assert row["access_token_enc"] is None and row["refresh_token_enc"] is None
    assert row["refresh_claim"] is None
    for grantee in (client, other):  # each grantee's stream and webhook, once
        events = await stream_events(env, grantee)
        assert [kind for kind, _ in events] == ["connection.needs_reauthorization"]
        assert (events[0][1]["connection_id"], events[0][1]["reason"]) == (ref, "invalid_grant")
        async with env.app.state.sessions() as session:
            queued = (
                await session.execute(
                    text("SELECT event_type FROM webhook_outbox WHERE server_client_id = :c"), {"c": grantee.id}
                )
            ).all()
        assert [q[0] for q in queued] == ["connection.needs_reauthorization"]
    assert second.outcomes.get("needs_reauthorization") is None


async def test_an_answer_for_another_account_needs_reauthorization(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub()
    # Tokens that answer for ``other``'s account, stored as the connection of ``sub``'s.
    other = new_sub("other")
    minted = env.oauth.mint(other, client_id=PROVIDER_CLIENT_ID, scope="files:read")
    tokens = token_set(minted["access_token"], minted["refresh_token"], raw=minted)
    ref = await store_connection(
        env.app,
        env.provider,
        tokens,
        iss=env.iss,
        sub=sub,
        account_id=env.oauth.account_id(sub),
        account_login=sub,
        requested=["files:read"],
        connected_by=client.id,
    )
    await grant(env.app, ref, client, ["files:read"])
    await make_due(env, ref)

    outcome = await prober(env).run_once()

    assert outcome.outcomes.get("needs_reauthorization") == 1
    (row,) = await connection_rows(env.app, sub)
    assert (row["health"], row["health_reason"], row["health_http_status"]) == (
        "needs_reauthorization",
        "account_changed",
        None,
    )
    assert row["access_token_enc"] is None
    assert [kind for kind, _ in await stream_events(env, client)] == ["connection.needs_reauthorization"]


async def test_a_5xx_storm_marks_nothing_and_rests_the_provider(env: Env, client: ServerClientHandle) -> None:
    subs = [new_sub("storm") for _ in range(3)]
    for sub in subs:
        ref, _ = await plant_connection(env, sub, granted_to=client)
        await make_due(env, ref)
    clock = ManualClock()
    storm = prober(env, clock, retry_seconds=300.0, concurrency=3)
    env.oauth.fail_next_api(503, count=3)
    before = probe_calls(env)

    first = await storm.run_once()
    resting = await storm.run_once()  # within the rest: the provider is not called at all

    assert probe_calls(env) - before == 3
    assert first.outcomes == {"unknown": 3}
    assert resting.claimed == 0
    for sub in subs:
        (row,) = await connection_rows(env.app, sub)
        assert (row["status"], row["health"], row["health_reason"]) == ("active", "healthy", None)
        assert row["refresh_claim"] is None
        assert row["access_token_enc"] is not None

    env.oauth.fail_next_api(429, count=3, retry_after=30)  # then a rate limit
    clock.advance(301)
    assert (await storm.run_once()).outcomes == {"unknown": 3}
    clock.advance(301)
    healed = await storm.run_once()

    assert healed.outcomes == {"ok": 3}
    assert probe_calls(env) - before == 9
    for sub in subs:
        (row,) = await connection_rows(env.app, sub)
        assert (row["health"], row["refresh_claim"]) == ("healthy", None)
    assert await stream_events(env, client) == []


async def test_two_replicas_probe_each_connection_once_and_not_again_within_the_interval(
    env: Env, client: ServerClientHandle
) -> None:
    subs = [new_sub("pair") for _ in range(4)]
    for sub in subs:
        ref, _ = await plant_connection(env, sub, granted_to=client)
        await make_due(env, ref)
    before = probe_calls(env)

    one, two = await asyncio.gather(prober(env).run_once(), prober(env).run_once())
    again = await prober(env).run_once()

    assert probe_calls(env) - before == len(subs)
    assert one.outcomes.get("ok", 0) + two.outcomes.get("ok", 0) == len(subs)
    assert again.outcomes.get("ok") is None
    for sub in subs:
        (row,) = await connection_rows(env.app, sub)
        assert (row["health"], row["refresh_claim"]) == ("healthy", None)
    assert await stream_events(env, client) == []


async def test_a_forbidden_answer_needs_reauthorization_but_a_rate_limited_one_does_not(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub()
    ref, _ = await plant_connection(env, sub, granted_to=client)
    await make_due(env, ref)
    env.oauth.fail_next_api(403, count=1, retry_after=60)  # GitHub's way of saying "slow down"

    limited = await prober(env).run_once()
    assert limited.outcomes.get("unknown") == 1
    (row,) = await connection_rows(env.app, sub)
    assert row["health"] == "healthy"

    env.oauth.fail_next_api(403, count=1)
    forbidden = await prober(env).run_once()

    assert forbidden.outcomes.get("needs_reauthorization") == 1
    (row,) = await connection_rows(env.app, sub)
    assert (row["health"], row["health_reason"], row["health_http_status"]) == (
        "needs_reauthorization",
        "probe_forbidden",
        403,
    )
