"""A slow provider costs one task, never the pool, and one token is refreshed once.

The provider here is the real OAuth server process with its token endpoint told to sleep; elicitd
instances are real servers on real sockets. Figures are printed (``pytest -s``) as measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import statistics
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event, text
from sqlalchemy.pool import QueuePool

from service.connections.refresh import REFRESH_WAIT_SECONDS
from service.errors import ServiceUnavailable
from service.services import build_services
from service.settings import Settings
from tests.connections.conftest import (
    Env,
    accepted_by_provider,
    create_flow,
    get_token,
    new_sub,
    plant_connection,
    provider_token_calls,
)
from tests.support.apps import RunningApp, ServerClientHandle, running_app
from tests.support.clock import ManualClock
from tests.support.waiting import until

PROVIDER_SLEEP_SECONDS = 10.0
TOKEN_REQUESTS = 50
RESOLVES = 200
RESOLVE_WORKERS = 2
RESOLVE_BOUND_SECONDS = 1.0
HELD_FOR_THE_CALL_SECONDS = 1.0  # the provider sleeps 3 s in the two-replica test


@dataclasses.dataclass(frozen=True)
class Checkout:
    """One pooled connection out and back: when, and which task's coroutine took it."""

    start: float
    end: float
    holder: str


class PoolWatch:
    """Samples how many pooled connections are checked out, every 2 ms, until stopped; and records
    every checkout exactly (the pool's own checkout and checkin events) with the task that made it."""

    def __init__(self, app: RunningApp) -> None:
        pool = app.services.engine.pool
        assert isinstance(pool, QueuePool)
        self.pool = pool
        self.size = pool.size()
        self.samples: list[int] = []
        self.times: list[float] = []
        self.checkouts: list[Checkout] = []
        self._out: dict[int, tuple[float, str]] = {}
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _checked_out(self, _dbapi: object, record: object, _proxy: object) -> None:
        task = asyncio.current_task()
        holder = task.get_coro().__qualname__ if task is not None else "?"  # type: ignore[union-attr]
        self._out[id(record)] = (time.perf_counter(), holder)

    def _checked_in(self, _dbapi: object, record: object) -> None:
        taken = self._out.pop(id(record), None)
        if taken is not None:
            self.checkouts.append(Checkout(taken[0], time.perf_counter(), taken[1]))

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.pool.checkedout())
            self.times.append(time.perf_counter())
            await asyncio.sleep(0.002)

    def start(self) -> None:
        event.listen(self.pool, "checkout", self._checked_out)
        event.listen(self.pool, "checkin", self._checked_in)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task
        event.remove(self.pool, "checkout", self._checked_out)
        event.remove(self.pool, "checkin", self._checked_in)
        now = time.perf_counter()
        self.checkouts.extend(Checkout(at, now, holder) for at, holder in self._out.values())  # still out

    def between(self, start: float, end: float) -> list[int]:
        return [n for n, at in zip(self.samples, self.times, strict=True) if start <= at <= end]

    def overlapping(self, start: float, end: float) -> list[Checkout]:
        return sorted((c for c in self.checkouts if c.end >= start and c.start <= end), key=lambda c: c.start)


async def set_row(env: Env, connection_ref: str, assignments: str) -> None:
    async with env.app.state.sessions() as session:
        await session.execute(
            text(f"UPDATE authorizations SET {assignments} WHERE 'cn_' || replace(id::text, '-', '') = :c"),
            {"c": connection_ref},
        )
        await session.commit()


async def claim_columns(env: Env, connection_ref: str) -> tuple[object, object]:
    async with env.app.state.sessions() as session:
        row = (
            await session.execute(
                text(
                    "SELECT refresh_claim, refresh_claimed_until FROM authorizations "
                    "WHERE 'cn_' || replace(id::text, '-', '') = :c"
                ),
                {"c": connection_ref},
            )
        ).one()
    return row[0], row[1]


async def refreshes_counted(app: RunningApp, provider: str) -> int:
    """``elicitd_token_refreshes_total{outcome="refreshed"}`` for ``provider``, from ``/metrics``."""
    async with app.http() as http:
        exposition = (await http.get("/metrics")).text
    total = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if (
                sample.name == "elicitd_token_refreshes_total"
                and sample.labels.get("provider") == provider
                and sample.labels.get("outcome") == "refreshed"
            ):
                total += sample.value
    return int(total)


def arrived_refreshes(env: Env) -> int:
    """Refresh grants that reached the provider's token endpoint (counted on arrival, before its sleep)."""
    return env.oauth.token_calls("refresh_token")


async def test_a_slow_token_endpoint_leaves_the_pool_and_other_requests_alone(
    env: Env, client: ServerClientHandle
) -> None:
    """50 token requests for one expiring token while the provider sleeps 10 s, and 200 resolves of
    another flow meanwhile: one refresh reaches the provider, every token request gets its token,
    the resolves stay fast, and the pool never runs out. The instance runs with the production
    defaults for the pool (10, no overflow) and the API-key cache (5 s)."""
    sub = new_sub("slow")
    connection, minted = await plant_connection(env, sub, granted_to=client, expires_in=5)  # inside the 60 s margin
    waiting = new_sub("waiting")
    created = await create_flow(env, client, waiting)
    resolve_body = {"subject": {"iss": env.iss, "sub": waiting}, "request_state": created["mcp"]["requestState"]}
    refresh_calls, arrived = provider_token_calls(env.oauth, "refresh_token"), arrived_refreshes(env)
    latencies: list[float] = []
    statuses: list[int] = []

    async def token_request(http: httpx.AsyncClient, i: int) -> httpx.Response:
        await asyncio.sleep(i * 0.04)  # all 50 are in flight within 2 s, long before the provider answers
        return await http.get(f"/v1/connections/{env.provider}/token", params={"iss": env.iss, "sub": sub})

    async def resolver(http: httpx.AsyncClient, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            response = await http.post("/v1/flows/resolve", json=resolve_body)
            latencies.append(time.perf_counter() - started)
            statuses.append(response.status_code)
            await asyncio.sleep(0.02)

    default_cache = next(f.default for f in dataclasses.fields(Settings) if f.name == "api_key_cache_seconds")
    settings = env.app.settings.with_(api_key_cache_seconds=default_cache)
    env.oauth.set_token_delay(PROVIDER_SLEEP_SECONDS)
    try:
        limits = httpx.Limits(max_connections=TOKEN_REQUESTS + RESOLVE_WORKERS + 10)
        async with (
            running_app(settings, keep_public_url=True) as app,
            app.http(client.api_key, limits=limits) as http,
        ):
            watch = PoolWatch(app)
            watch.start()
            began = time.perf_counter()
            tokens = [asyncio.create_task(token_request(http, i)) for i in range(TOKEN_REQUESTS)]
            await until(lambda: arrived_refreshes(env) > arrived, what="the refresh reaching the provider")
            # Every token request is sent by 2 s after the first; from then on they all wait on the
            # one refresh, and none of them may hold a pooled connection while they wait.
            parked_from = began + TOKEN_REQUESTS * 0.04 + 0.5
            await asyncio.gather(*(resolver(http, RESOLVES // RESOLVE_WORKERS) for _ in range(RESOLVE_WORKERS)))
            resolves_done = time.perf_counter() - began
            refresh_still_running = not any(t.done() for t in tokens)
            responses = await asyncio.gather(*tokens)
            tokens_done = time.perf_counter() - began
            await watch.stop()
    finally:
        env.oauth.set_token_delay(0)

    assert refresh_still_running, "the resolves must have run while the provider was still asleep"
    assert [r.status_code for r in responses] == [200] * TOKEN_REQUESTS
    (token,) = {r.json()["access_token"] for r in responses}
    assert token != minted["access_token"] and accepted_by_provider(env, token)
    assert {r.json()["connection_id"] for r in responses} == {connection}
    assert provider_token_calls(env.oauth, "refresh_token") == refresh_calls + 1
    assert arrived_refreshes(env) == arrived + 1
    assert statuses == [200] * RESOLVES
    assert max(latencies) < RESOLVE_BOUND_SECONDS, max(latencies)
    assert len(watch.samples) > 1000
    while_parked = watch.between(parked_from, began + tokens_done - 0.5)
    assert len(while_parked) > 500
    assert max(while_parked) < watch.size, (max(while_parked), watch.size)
    assert await claim_columns(env, connection) == (None, None)
    print(
        f"\nslow provider ({PROVIDER_SLEEP_SECONDS:g} s): 1 refresh for {TOKEN_REQUESTS} token requests "
        f"(all answered at {tokens_done:.1f} s); {RESOLVES} resolves done at {resolves_done:.1f} s, "
        f"latency p50 {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms; "
        f"pool checked out at most {max(while_parked)} of {watch.size} while the token requests waited "
        f"({len(while_parked)} samples; at most {max(watch.samples)} during their arrival)"
    )


async def test_two_replicas_refreshing_one_connection_make_one_provider_call(
    env: Env, client: ServerClientHandle
) -> None:
    """Two running instances on one database, each asked several times at once: one wins the claim
    and calls the provider; the other finds the claim, waits, and answers with the winner's token."""
    sub = new_sub("pair")
    connection, minted = await plant_connection(env, sub, granted_to=client, expires_in=5)
    refresh_calls, arrived = provider_token_calls(env.oauth, "refresh_token"), arrived_refreshes(env)
    env.oauth.set_token_delay(3)
    try:
        async with running_app(env.app.settings, keep_public_url=True) as second:
            replicas = [env.app, second]
            counted_before = [await refreshes_counted(app, env.provider) for app in replicas]
            watches = [PoolWatch(app) for app in replicas]
            for watch in watches:
                watch.start()
            asked = [asyncio.create_task(get_token(env, client, sub, app=replicas[i % 2])) for i in range(10)]
            await until(lambda: arrived_refreshes(env) > arrived, what="the refresh reaching the provider")
            reached = time.perf_counter()
            responses = await asyncio.gather(*asked)
            for watch in watches:
                await watch.stop()
            counted = [
                await refreshes_counted(app, env.provider) - before
                for app, before in zip(replicas, counted_before, strict=True)
            ]
    finally:
        env.oauth.set_token_delay(0)
    assert [r.status_code for r in responses] == [200] * 10
    (token,) = {r.json()["access_token"] for r in responses}
    assert token != minted["access_token"] and accepted_by_provider(env, token)
    assert provider_token_calls(env.oauth, "refresh_token") == refresh_calls + 1
    assert arrived_refreshes(env) == arrived + 1
    assert sorted(counted) == [0, 1]  # one replica refreshed, the other read its token
    # While the provider sleeps, neither replica holds a connection for it. What is checked out at
    # all is a short read now and then: the loser's look at the row (its one flight, so never two
    # looks at once) and the background loops' own rounds (the webhook worker's poll, which may
    # coincide with a look); most of the time nothing. A connection held for the provider's call
    # would be out for the whole 3 s sleep (a share of 1.0), so no checkout may last
    # HELD_FOR_THE_CALL_SECONDS and the share stays under half. A read is milliseconds, but on a
    # loaded machine one has taken a quarter of a second (the test, both replicas and their loops
    # share one event loop), which says nothing about the design.
    lo, hi = reached + 0.5, reached + 2.5
    sleeping = [watch.between(lo, hi) for watch in watches]
    assert all(len(samples) > 100 for samples in sleeping)
    for watch in watches:
        out = watch.overlapping(lo, hi)
        assert all(c.end - c.start < HELD_FOR_THE_CALL_SECONDS for c in out), [(c.holder, c.end - c.start) for c in out]
        looks = [c for c in out if c.holder == "Refreshes._flight"]
        assert all(a.end <= b.start for a, b in itertools.pairwise(looks)), looks
    holders = {c.holder for watch in watches for c in watch.overlapping(lo, hi)}
    assert "Refreshes._flight" in holders  # the loser did look meanwhile
    busy = [sum(samples) / len(samples) for samples in sleeping]
    assert all(share < 0.5 for share in busy), busy
    print(f"\ntwo replicas: 1 provider call for 10 requests; share of time a connection was out: {busy}")
    assert await claim_columns(env, connection) == (None, None)


async def test_a_claim_left_by_a_replica_that_died_lapses_and_is_taken_over(
    env: Env, client: ServerClientHandle
) -> None:
    sub = new_sub("orphan")
    connection, minted = await plant_connection(env, sub, granted_to=client)
    # Another replica claimed the refresh a while ago and died; its claim runs out in 1 s.
    await set_row(
        env,
        connection,
        "expires_at = now() - interval '1 second', refresh_claim = gen_random_uuid(), "
        "refresh_claimed_until = now() + interval '1 second'",
    )
    _, lapses_at = await claim_columns(env, connection)
    refresh_calls = provider_token_calls(env.oauth, "refresh_token")
    response = await get_token(env, client, sub)
    assert response.status_code == 200
    assert response.json()["access_token"] != minted["access_token"]
    assert provider_token_calls(env.oauth, "refresh_token") == refresh_calls + 1
    async with env.app.state.sessions() as session:
        refreshed_at = (
            await session.execute(
                text("SELECT refreshed_at FROM authorizations WHERE 'cn_' || replace(id::text, '-', '') = :c"),
                {"c": connection},
            )
        ).scalar_one()
    assert refreshed_at >= lapses_at  # it waited for the claim to end, then refreshed itself


async def test_waiting_on_another_replicas_claim_is_bounded(env: Env, client: ServerClientHandle) -> None:
    """With the claim held elsewhere for longer than the wait bound: a token that is still valid
    is answered as it is; an expired one gets 503 + Retry-After. The provider is never called."""
    clock = ManualClock()
    # The same services an instance builds, on a clock the test moves; no web app is needed.
    services = build_services(env.app.settings, clock=clock)
    service = services.connections
    who = await services.authenticator.authenticate(f"Bearer {client.api_key}")
    sub = new_sub("held")
    connection, minted = await plant_connection(env, sub, granted_to=client, expires_in=5)  # due, still valid
    await set_row(
        env, connection, f"refresh_claim = '{uuid.uuid4()}', refresh_claimed_until = now() + interval '1 hour'"
    )
    refresh_calls = provider_token_calls(env.oauth, "refresh_token")

    async def ask_after_the_bound() -> asyncio.Task[object]:
        task: asyncio.Task[object] = asyncio.create_task(
            service.token(who, env.provider, iss=env.iss, sub=sub, scopes=[], account=None)
        )
        await until(lambda: bool(clock.deadlines()), what="the request pausing on the other claim")
        assert not task.done()
        clock.advance(REFRESH_WAIT_SECONDS)
        await asyncio.wait([task])
        return task

    try:
        answered = await ask_after_the_bound()
        await set_row(env, connection, "expires_at = now() - interval '1 second'")
        refused = await ask_after_the_bound()
    finally:
        await services.http.aclose()
        await services.engine.dispose()
    assert getattr(answered.result(), "access_token", None) == minted["access_token"]  # still valid
    error = refused.exception()
    assert isinstance(error, ServiceUnavailable)
    assert error.headers == {"Retry-After": "2"}
    assert provider_token_calls(env.oauth, "refresh_token") == refresh_calls


@pytest.mark.parametrize("failure", ["server_error", "temporarily_unavailable"])
async def test_a_failed_refresh_gives_its_claim_up_at_once(env: Env, client: ServerClientHandle, failure: str) -> None:
    sub = new_sub("fails")
    connection, minted = await plant_connection(env, sub, granted_to=client, expires_in=5)
    env.oauth.fail_next_refresh(failure, status=503 if failure == "temporarily_unavailable" else 500)
    first = await get_token(env, client, sub)
    assert first.status_code == 200 and first.json()["access_token"] == minted["access_token"]  # still valid
    assert await claim_columns(env, connection) == (None, None)
    second = await get_token(env, client, sub)  # no wait for a claim to lapse
    assert second.status_code == 200 and second.json()["access_token"] != minted["access_token"]
