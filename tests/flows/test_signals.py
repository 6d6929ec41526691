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


async def test_resolve_on_one_instance_wakes_on_completion_made_on_another(
    make_settings: Callable[..., Settings], subject: Subject
) -> None:
    # Polling so slow that only a Redis wake-up can finish this within the assertion's bound.
    settings = make_settings(poll_interval_seconds=120.0)
    async with running_app(settings) as a, running_app(settings) as b:
        assert a.state.hub is not b.state.hub
        client = await new_server_client(a)
        async with a.http(client.api_key) as http_a, b.http(client.api_key) as http_b:
            created = await create_external(http_a, subject)
            for _ in range(100):  # both listeners subscribed
                if a.state.hub.healthy and b.state.hub.healthy:
                    break
                await asyncio.sleep(0.05)
            waiting = asyncio.create_task(
                http_a.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=25))
            )
            await asyncio.sleep(0.5)
            assert not waiting.done()
            received_before = a.state.hub.received
            loop = asyncio.get_running_loop()
            start = loop.time()
            done = await http_b.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {"v": 1}})
            assert done.status_code == 200
            response = await asyncio.wait_for(waiting, 10)
            elapsed = loop.time() - start
    assert response.json()["outcome"] == "completed"
    assert response.json()["result"] == {"v": 1}
    assert elapsed < 2.0, f"woken after {elapsed:.2f}s: not by the Redis signal"
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
                for _ in range(100):
                    if a.state.hub.healthy and b.state.hub.healthy:
                        break
                    await asyncio.sleep(0.05)
                assert a.state.hub.healthy
                waiting = asyncio.create_task(
                    http_a.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=20))
                )
                await asyncio.sleep(0.3)
                redis.stop()
                for _ in range(100):
                    if not a.state.hub.healthy:
                        break
                    await asyncio.sleep(0.05)
                assert not a.state.hub.healthy
                ready = (await http_a.get("/readyz")).json()
                assert ready == {"status": "ready", "postgres": "ok", "redis": "down", "wakeups": "polling"}
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
            await asyncio.sleep(0.3)
            await http_b.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {}})
            response = await asyncio.wait_for(waiting, 5)
            ready = (await http_a.get("/readyz")).json()
    assert response.json()["flow"]["status"] == "completed"
    assert ready == {"status": "ready", "postgres": "ok", "redis": "not_configured", "wakeups": "polling"}
