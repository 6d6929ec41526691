"""A batch of wake-ups travels as a few messages of many ids, and wakes every waiter elsewhere."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import redis.asyncio as aioredis

from service.signals.bus import WaiterHub
from service.signals.direct import IDS_PER_MESSAGE, messages
from tests.support import backends
from tests.support.waiting import until


async def _nothing_finished(ids: list[uuid.UUID]) -> Iterable[uuid.UUID]:
    return []


def _hub(redis_url: str, channel: str) -> WaiterHub:
    # Polls only every 30 s: a wake within the test's bounds came through Redis.
    return WaiterHub(
        redis_url=redis_url, channel=channel, poll_interval=30, safety_poll_interval=30, finished=_nothing_finished
    )


def test_messages_carry_up_to_a_hundred_ids_each() -> None:
    ids = [uuid.uuid4() for _ in range(2 * IDS_PER_MESSAGE + 1)]
    payloads = list(messages(ids))
    assert [len(p.split()) for p in payloads] == [IDS_PER_MESSAGE, IDS_PER_MESSAGE, 1]
    assert [uuid.UUID(hex=h) for p in payloads for h in p.split(" ")] == ids
    assert list(messages(ids[:1])) == [ids[0].hex]  # one completion: one id, as before


async def test_a_batch_of_250_is_three_messages_and_wakes_all_250(backend: backends.Backends) -> None:
    channel = f"elicitd:test:{uuid.uuid4().hex[:8]}"
    a, b = _hub(backend.redis_url, channel), _hub(backend.redis_url, channel)
    listener = aioredis.Redis.from_url(backend.redis_url)
    spy = listener.pubsub()
    await spy.subscribe(channel)
    confirmed = await spy.get_message(timeout=5)
    assert confirmed is not None and confirmed["type"] == "subscribe"
    await a.start()
    await b.start()
    try:
        await until(lambda: a.healthy and b.healthy, what="both hubs subscribed")
        ids = [uuid.uuid4() for _ in range(250)]
        waiters = [b.register(flow_id) for flow_id in ids]
        waits = [asyncio.create_task(w.wait(20)) for w in waiters]
        received = b.received
        await a.publish(ids)
        assert await asyncio.wait_for(asyncio.gather(*waits), timeout=10) == [True] * 250
        assert b.received - received == 250
        seen: list[str] = []
        while len(seen) < 3:
            message = await spy.get_message(timeout=5)
            assert message is not None and message["type"] == "message", message
            seen.append(message["data"].decode())
        assert [len(m.split()) for m in seen] == [100, 100, 50]
        # A payload that is not ids wakes nothing and breaks nothing.
        stray = uuid.uuid4()
        with b.register(stray) as waiter:
            await listener.publish(channel, f"not-an-id {stray.hex} also-not")
            assert await waiter.wait(10) is True
    finally:
        for w in waiters:
            w.close()
        await a.stop()
        await b.stop()
        await spy.aclose()  # type: ignore[no-untyped-call]
        await listener.aclose()


def test_a_waiter_is_registered_until_it_is_closed() -> None:
    """``register`` registers at once (a wake-up between it and the caller's read is not missed);
    ``close()`` unregisters, once or twice, leaving the flow's other waiters alone."""
    hub = _hub("redis://127.0.0.1:1/0", "elicitd:test:unused")
    flow_id = uuid.uuid4()
    first = hub.register(flow_id)
    second = hub.register(flow_id)
    assert (hub.waiter_count, hub.waiters_on(flow_id)) == (2, 2)
    first.close()
    first.close()
    assert (hub.waiter_count, hub.waiters_on(flow_id)) == (1, 1)
    with second:
        pass
    assert (hub.waiter_count, hub.waiters_on(flow_id)) == (0, 0)
