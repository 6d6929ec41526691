"""Wake-ups across instances through Redis, and completions that survive Redis going away."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from service.embedded import EmbeddedRedis
from service.flows.schemas import Subject
from service.settings import Settings
from tests.flows.helpers import create_external, resolve_body
from tests.support.apps import new_server_client, running_app
from tests.support.clock import ManualClock
from tests.support.waiting import parked, until

# What readiness says about the dependencies (it also counts clients without subject proof).
READINESS = ("status", "postgres", "redis", "wakeups")


async def test_resolve_on_one_instance_wakes_on_completion_made_on_another(
    make_settings: Callable[..., Settings], subject: Subject
) -> None:
    # Instance a runs on a clock that never moves: no poll tick and no wait timeout of it can fire,
    # so only the Redis wake-up that b publishes can end the wait.
    settings = make_settings()
    async with running_app(settings, clock=ManualClock()) as a, running_app(settings) as b:
        assert a.state.hub is not b.state.hub
        client = await new_server_client(a)
        async with a.http(client.api_key) as http_a, b.http(client.api_key) as http_b:
            created = await create_external(http_a, subject)
            await until(lambda: a.state.hub.healthy and b.state.hub.healthy, what="both listeners subscribed")
            waiting = asyncio.create_task(
                http_a.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=25))
            )
            await parked(a, created["flow"]["id"])
            assert not waiting.done()
            received_before = a.state.hub.received
            done = await http_b.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {"v": 1}})
            assert done.status_code == 200
            response = await asyncio.wait_for(waiting, 10)
    assert response.json()["outcome"] == "completed"
    assert response.json()["result"] == {"v": 1}
    assert a.state.hub.received > received_before


async def test_redis_stopped_mid_wait_still_returns_the_completion(
    make_settings: Callable[..., Settings], subject: Subject, tmp_path: Path
) -> None:
    redis = EmbeddedRedis(tmp_path / "redis").start()
    try:
        settings = make_settings(redis_url=redis.url, poll_interval_seconds=0.3)
        async with running_app(settings) as a, running_app(settings) as b:
            client = await new_server_client(a)
            async with a.http(client.api_key) as http_a, b.http(client.api_key) as http_b:
                created = await create_external(http_a, subject)
                await until(lambda: a.state.hub.healthy and b.state.hub.healthy, what="both listeners subscribed")
                waiting = asyncio.create_task(
                    http_a.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=20))
                )
                await parked(a, created["flow"]["id"])
                redis.stop()
                await until(lambda: not a.state.hub.healthy, what="the lost subscription noticed")
                ready = (await http_a.get("/readyz")).json()
                assert {k: ready[k] for k in READINESS} == {
                    "status": "ready",
                    "postgres": "ok",
                    "redis": "down",
                    "wakeups": "polling",
                }
                done = await http_b.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {"v": 2}})
                assert done.status_code == 200
                response = await asyncio.wait_for(waiting, 10)
    finally:
        redis.stop()
    assert response.json()["outcome"] == "completed"
    assert response.json()["result"] == {"v": 2}


async def test_without_redis_configured_waits_finish_by_polling(
    make_settings: Callable[..., Settings], subject: Subject
) -> None:
    settings = make_settings(redis_url=None, poll_interval_seconds=0.2)
    async with running_app(settings) as a, running_app(settings) as b:
        client = await new_server_client(a)
        async with a.http(client.api_key) as http_a, b.http(client.api_key) as http_b:
            created = await create_external(http_a, subject)
            waiting = asyncio.create_task(http_a.get(f"/v1/flows/{created['flow']['id']}", params={"wait_seconds": 15}))
            await parked(a, created["flow"]["id"])
            await http_b.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {}})
            response = await asyncio.wait_for(waiting, 5)
            ready = (await http_a.get("/readyz")).json()
    assert response.json()["flow"]["status"] == "completed"
    assert {k: ready[k] for k in READINESS} == {
        "status": "ready",
        "postgres": "ok",
        "redis": "not_configured",
        "wakeups": "polling",
    }
