"""A wave of due tokens on the real OAuth test server: two replicas' refresh passes share it (each
authorization refreshed exactly once), keep to the configured pace (the provider never sees more
than the replicas' rates together in any second), and a pass starts no call once too little of its
claim is left for the call's whole deadline (what it could not start is released, not refreshed
twice). The 10,000-connection wave is ``make bench`` (``bench/refresh_wave.py``); this is the
same code at a size the suite can afford.
"""

from __future__ import annotations

import asyncio
import bisect
import time
import uuid

from sqlalchemy import text

from service.connections.refresher import Refresher, RefreshSettings
from service.connections.sealing import ACCESS_TOKEN, REFRESH_TOKEN, binding
from service.db.base import CONNECTION_ID, uuid7
from tests.connections.conftest import PROVIDER_CLIENT_ID, Env


async def seed_due(env: Env, count: int) -> list[uuid.UUID]:
    """``count`` connections of tokens the provider really issued, due within two minutes, written
    with one bulk INSERT per table (their tokens sealed as the service seals them)."""
    vault = env.app.state.vault
    tag = uuid.uuid4().hex[:6]
    rows = []
    for n in range(count):
        sub = f"wave-{tag}-{n}"
        minted = env.oauth.mint(sub, client_id=PROVIDER_CLIENT_ID, scope="files:read")
        cid, account = uuid7(), env.oauth.account_id(sub)
        bound = binding(env.iss, sub, env.provider, account)
        owner = CONNECTION_ID.format(cid)
        a_kid, a_enc = vault.encrypt(minted["access_token"], owner=owner, purpose=ACCESS_TOKEN, bound=bound)
        r_kid, r_enc = vault.encrypt(minted["refresh_token"], owner=owner, purpose=REFRESH_TOKEN, bound=bound)
        rows.append((cid, sub, account, a_enc, a_kid, r_enc, r_kid))
    columns = list(zip(*rows, strict=True))
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, account_login, scopes, "
                "expires_at, status) SELECT id, :iss, sub, :p, account, sub, '{files:read}', "
                "now() + interval '2 minutes', 'active' FROM unnest(CAST(:ids AS uuid[]), CAST(:subs AS text[]), "
                "CAST(:accounts AS text[])) AS t(id, sub, account)"
            ),
            {"iss": env.iss, "p": env.provider, "ids": list(columns[0]), "subs": list(columns[1]),
             "accounts": list(columns[2])},
        )  # fmt: skip
        await session.execute(
            text(
                "INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, "
                "scopes, access_token_enc, access_token_key_id, refresh_token_enc, refresh_token_key_id, "
                "expires_at, checked_at, status) SELECT c.id, c.id, c.subject_iss, c.subject_sub, c.provider, "
                "c.account_id, c.scopes, t.a, t.ak, t.r, t.rk, c.expires_at, now() - interval '1 day', 'active' "
                "FROM unnest(CAST(:ids AS uuid[]), CAST(:a AS bytea[]), CAST(:ak AS text[]), CAST(:r AS bytea[]), "
                "CAST(:rk AS text[])) AS t(id, a, ak, r, rk) JOIN connections c ON c.id = t.id"
            ),
            {"ids": list(columns[0]), "a": list(columns[3]), "ak": list(columns[4]), "r": list(columns[5]),
             "rk": list(columns[6])},
        )  # fmt: skip
        await session.commit()
    return list(columns[0])


async def wave_rows(env: Env, ids: list[uuid.UUID]) -> list[tuple[bool, bool]]:
    """(refreshed, still claimed) of each seeded authorization."""
    async with env.app.state.sessions() as session:
        found = await session.execute(
            text("SELECT refreshed_at IS NOT NULL, refresh_claim IS NOT NULL FROM authorizations WHERE id = ANY(:ids)"),
            {"ids": ids},
        )
        return [(r[0], r[1]) for r in found]


def refresh_starts(env: Env, since: int) -> list[float]:
    return sorted(
        r.started_at
        for r in env.oauth.token_requests()[since:]
        if r.grant_type == "refresh_token" and r.client_id == PROVIDER_CLIENT_ID
    )


async def test_two_replicas_share_a_wave_at_the_pace_each_token_once(env: Env) -> None:
    ids = await seed_due(env, 60)
    seen = len(env.oauth.token_requests())
    # Two replicas, each at 15 calls a second to this provider: 30 a second together. The pace is
    # what this measures: the governor, which would hold fewer calls in flight on a busy machine,
    # is off (test_a_wave_yields_to_a_busy_loop_and_still_refreshes_each_token_once has it on).
    settings = RefreshSettings(batch_size=30, concurrency=8, provider_rate=15.0, loop_lag_ms=None)
    one, two = Refresher(env.app.state.connections, settings), Refresher(env.app.state.connections, settings)

    first, second = await asyncio.gather(one.run_once(), two.run_once())

    assert (first.claimed, second.claimed) == (30, 30)
    assert first.outcomes.get("refreshed", 0) + second.outcomes.get("refreshed", 0) == 60
    assert await wave_rows(env, ids) == [(True, False)] * 60
    starts = refresh_starts(env, seen)
    assert len(starts) == 60  # each authorization's refresh token used exactly once
    in_any_second = max(bisect.bisect_left(starts, t + 1.0) - i for i, t in enumerate(starts))
    # 30 a second (+1 for each replica's first slot and the provider's own jitter in noting starts).
    assert in_any_second <= 32, starts
    assert starts[-1] - starts[0] >= 1.8, starts  # 30 per replica at 15/s span at least 29/15 s


async def test_a_pass_starts_no_call_its_claim_cannot_cover(env: Env) -> None:
    ids = await seed_due(env, 5)
    env.oauth.set_token_delay(0.4)
    seen = len(env.oauth.token_requests())
    try:
        # Calls may start only within 0.5 s of the claim; one at a time, each taking 0.4 s.
        narrow = Refresher(
            env.app.state.connections, RefreshSettings(batch_size=5, concurrency=1, call_window_seconds=0.5)
        )
        outcome = await narrow.run_once()
    finally:
        env.oauth.set_token_delay(0)

    assert outcome.claimed == 5
    assert outcome.outcomes == {"refreshed": 2, "lapsed": 3}
    assert len(refresh_starts(env, seen)) == 2
    assert sorted(await wave_rows(env, ids)) == [(False, False)] * 3 + [(True, False)] * 2

    again = await Refresher(env.app.state.connections, RefreshSettings(batch_size=5000)).run_once()
    assert again.outcomes.get("refreshed") == 3
    assert await wave_rows(env, ids) == [(True, False)] * 5


async def test_a_wave_yields_to_a_busy_loop_and_still_refreshes_each_token_once(env: Env) -> None:
    ids = await seed_due(env, 24)
    seen = len(env.oauth.token_requests())
    stop = asyncio.Event()

    async def busy_api() -> None:
        # The loop kept late, as by a saturated API: 30 ms of work between awaits.
        while not stop.is_set():
            time.sleep(0.03)
            await asyncio.sleep(0)

    refresher = Refresher(env.app.state.connections, RefreshSettings(batch_size=24, concurrency=8, loop_lag_ms=10.0))
    busy = asyncio.create_task(busy_api())
    try:
        outcome = await refresher.run_once()
    finally:
        stop.set()
        await busy

    assert outcome.claimed == 24
    assert outcome.outcomes.get("refreshed", 0) + outcome.outcomes.get("lapsed", 0) == 24
    assert refresher.governor.allowed <= 2  # of 8: the wave gave way
    again = await Refresher(env.app.state.connections, RefreshSettings(batch_size=5000)).run_once()
    assert outcome.outcomes.get("refreshed", 0) + again.outcomes.get("refreshed", 0) == 24
    assert await wave_rows(env, ids) == [(True, False)] * 24
    assert len(refresh_starts(env, seen)) == 24  # each refresh token used exactly once
