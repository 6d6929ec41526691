"""One Redis's publishing connection (``DirectPublisher``): the announcing call writes ``PUBLISH``
itself; every write is answered within ``PUBLISH_TIMEOUT_SECONDS`` or fails, and a new connection
is made once Redis answers again. Against real redis-server processes: paused (SIGSTOP), killed
and restarted on the same port, and one with a password and an ACL user on a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from service.embedded import redis_server_binary
from service.signals.bus import WaiterHub
from service.signals.transport import PUBLISH_TIMEOUT_SECONDS, DirectPublisher, publish_command
from tests.signals.test_bus_logging import Records, bus_log  # noqa: F401 - the fixture
from tests.support import backends
from tests.support.faults import PrivateRedis, private_redis
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]
APP_PASSWORD = "APP-PW-7f3c"  # noqa: S105 - a test server's


def _channel() -> str:
    return f"elicitd:test:{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def _spy(url: str, channel: str) -> AsyncIterator[PubSub]:
    """A plain redis-py subscriber on ``channel``, confirmed."""
    client = aioredis.Redis.from_url(url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
        confirmed = await pubsub.get_message(timeout=5)
        assert confirmed is not None and confirmed["type"] == "subscribe"
        yield pubsub
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()


async def _received(pubsub: PubSub, count: int) -> list[str]:
    seen: list[str] = []
    while len(seen) < count:
        message = await pubsub.get_message(timeout=5)
        assert message is not None and message["type"] == "message", message
        seen.append(message["data"].decode())
    return seen


@contextlib.asynccontextmanager
async def _publisher(url: str, channel: str) -> AsyncIterator[DirectPublisher]:
    publisher = DirectPublisher(url, channel=channel)
    try:
        yield publisher
    finally:
        await publisher.aclose()


@pytest.fixture
def paused_redis() -> Iterator[PrivateRedis]:
    with private_redis("publisher") as server:
        yield server


def test_a_publish_command_is_what_redis_reads() -> None:
    assert publish_command(b"elicitd:wakeups", "ab cd") == (
        b"*3\r\n$7\r\nPUBLISH\r\n$15\r\nelicitd:wakeups\r\n$5\r\nab cd\r\n"
    )


async def test_a_send_is_written_at_once_and_settles_with_redis_answer(backend: backends.Backends) -> None:
    channel = _channel()
    async with _spy(backend.redis_url, channel) as spy, _publisher(backend.redis_url, channel) as publisher:
        assert publisher.send([uuid.uuid4()]) is None  # no connection yet: the caller queues
        await publisher.connect()
        assert publisher.connected
        one = uuid.uuid4()
        many = [uuid.uuid4() for _ in range(250)]
        first, second = publisher.send([one]), publisher.send(many)
        assert first is not None and second is not None
        assert not first.done()  # written, not yet answered
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert await _received(spy, 4) == [
            one.hex,
            " ".join(i.hex for i in many[:100]),
            " ".join(i.hex for i in many[100:200]),
            " ".join(i.hex for i in many[200:]),
        ]
        await publisher.publish([one])  # the awaited path on a live connection
        assert await _received(spy, 1) == [one.hex]


async def test_a_paused_redis_fails_the_writes_within_the_bound_and_a_new_connection_follows(
    paused_redis: PrivateRedis,
) -> None:
    channel = _channel()
    async with _publisher(paused_redis.url, channel) as publisher:
        await publisher.connect()
        paused_redis.pause()
        try:
            started = time.monotonic()
            writes = [publisher.send([uuid.uuid4()]) for _ in range(3)]
            assert all(w is not None for w in writes)
            outcomes = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 5)  # type: ignore[arg-type]
            failed_after = time.monotonic() - started
            assert [type(o) for o in outcomes] == [TimeoutError] * 3
            assert PUBLISH_TIMEOUT_SECONDS - 0.05 <= failed_after < PUBLISH_TIMEOUT_SECONDS + 0.5
            assert not publisher.connected
            assert publisher.send([uuid.uuid4()]) is None
            # A connection to a hung Redis is not made: the handshake is bounded too.
            started = time.monotonic()
            with pytest.raises((TimeoutError, RedisError)):
                await publisher.publish([uuid.uuid4()])
            assert time.monotonic() - started < 2.0
        finally:
            paused_redis.resume()
        async with _spy(paused_redis.url, channel) as spy:
            again = uuid.uuid4()
            await asyncio.wait_for(publisher.publish([again]), 5)
            assert publisher.connected
            assert await _received(spy, 1) == [again.hex]


async def test_a_killed_redis_is_noticed_without_a_write_and_the_restarted_one_is_used(
    paused_redis: PrivateRedis,
) -> None:
    channel = _channel()
    async with _publisher(paused_redis.url, channel) as publisher:
        await publisher.connect()
        paused_redis.kill()
        await until(lambda: not publisher.connected, timeout=2, what="the lost connection noticed")
        assert publisher.send([uuid.uuid4()]) is None
        with pytest.raises(RedisConnectionError):
            await publisher.publish([uuid.uuid4()])  # refused: nothing listens on the port
        paused_redis.start()
        async with _spy(paused_redis.url, channel) as spy:
            again = uuid.uuid4()
            await asyncio.wait_for(publisher.publish([again]), 5)
            assert await _received(spy, 1) == [again.hex]


@pytest.fixture
def acl_redis() -> Iterator[Path]:
    """redis-server on a unix socket only, with a password for ``default`` and a user ``app`` that
    may use the ``elicitd:*`` channels and no others."""
    root = ROOT / ".data" / "test" / f"acl-redis-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    socket = root / "redis.sock"
    process = subprocess.Popen(  # noqa: S603 - fixed binary and arguments
        [
            redis_server_binary(),
            *("--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700"),
            *("--requirepass", "default-not-used"),
            *("--user", "app", "on", f">{APP_PASSWORD}", "resetchannels", "&elicitd:*", "+@all"),
            *("--save", "", "--appendonly", "no", "--dir", str(root), "--loglevel", "warning"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not socket.exists():
            assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield socket
    finally:
        process.terminate()
        process.wait(5)
        shutil.rmtree(root, ignore_errors=True)


async def test_a_user_and_password_on_a_unix_socket(acl_redis: Path) -> None:
    url = f"unix://app:{APP_PASSWORD}@{acl_redis}"
    channel = _channel()
    async with _spy(url, channel) as spy, _publisher(url, channel) as publisher:
        flow = uuid.uuid4()
        await asyncio.wait_for(publisher.publish([flow]), 5)
        assert await _received(spy, 1) == [flow.hex]
    # Redis refusing a command is that write's failure; the connection goes on.
    async with _publisher(url, "forbidden") as publisher:
        with pytest.raises(ResponseError, match="^NOPERM"):
            await asyncio.wait_for(publisher.publish([uuid.uuid4()]), 5)
        assert publisher.connected
        with pytest.raises(ResponseError, match="^NOPERM"):
            await asyncio.wait_for(publisher.publish([uuid.uuid4()]), 5)
    # A wrong password is refused at connect, and the error does not repeat it.
    async with _publisher(f"unix://app:WRONG-PW-2b1e@{acl_redis}", channel) as publisher:
        with pytest.raises(RedisConnectionError, match="invalid username-password pair") as refused:
            await publisher.connect()
        assert "WRONG-PW-2b1e" not in f"{refused.value!s} {refused.value!r}"
        assert not publisher.connected


async def _nothing_finished(ids: list[uuid.UUID]) -> Iterable[uuid.UUID]:
    return []


def _hub(url: str, channel: str) -> WaiterHub:
    return WaiterHub(
        redis_url=url, channel=channel, poll_interval=0.5, safety_poll_interval=30, finished=_nothing_finished
    )


async def test_the_hub_writes_in_the_announcing_call_and_counts_what_redis_took(backend: backends.Backends) -> None:
    channel = _channel()
    hub = _hub(backend.redis_url, channel)
    async with _spy(backend.redis_url, channel) as spy:
        await hub.start()
        try:
            await until(lambda: hub.healthy, what="the hub subscribed")
            flow = uuid.uuid4()
            await hub.publish([flow])
            assert hub.publish_backlog == 0  # written, not queued for the publishing task
            assert await _received(spy, 1) == [flow.hex]
            await until(lambda: hub.published == 1, what="Redis's answer counted")
            assert (hub.publish_failures, hub.publish_dropped) == (0, 0)
        finally:
            await hub.stop()


async def test_the_hub_counts_writes_a_paused_redis_never_answered_and_warns_once(
    paused_redis: PrivateRedis,
    bus_log: Records,  # noqa: F811 - the fixture
) -> None:
    hub = _hub(paused_redis.url, _channel())
    await hub.start()
    try:
        await until(lambda: hub.healthy, what="the hub subscribed")
        paused_redis.pause()
        for _ in range(5):
            await hub.publish([uuid.uuid4()])
        assert hub.publish_backlog == 0
        await until(lambda: hub.publish_failures == 5, timeout=3, what="the writes failed")
        assert hub.published == 0
        assert bus_log.at(logging.WARNING).count("publish failed; waiters elsewhere will poll") == 1
        paused_redis.resume()
        await until(lambda: hub.healthy, timeout=5, what="the hub back on Redis")
        await hub.publish([uuid.uuid4()])
        await until(lambda: hub.published == 1, timeout=3, what="the next publish taken")
    finally:
        paused_redis.resume()
        await hub.stop()


async def test_wakeups_cross_hubs_on_a_unix_socket_with_an_acl_user(acl_redis: Path) -> None:
    url = f"unix://app:{APP_PASSWORD}@{acl_redis}"
    channel = _channel()
    a, b = _hub(url, channel), _hub(url, channel)
    await a.start()
    await b.start()
    try:
        await until(lambda: a.healthy and b.healthy, what="both hubs subscribed")
        assert (a.redis_failure, b.redis_failure) == (None, None)
        flow = uuid.uuid4()
        with b.register(flow) as waiter:
            await a.publish([flow])
            assert await waiter.wait(5) is True
        assert b.received == 1
    finally:
        await a.stop()
        await b.stop()
