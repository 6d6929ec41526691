"""One Redis spoken to directly (``service.signals.direct``).

The publishing connection: the announcing call writes ``PUBLISH`` itself; every write is answered
within ``PUBLISH_TIMEOUT_SECONDS`` or fails, and a new connection is made once Redis answers again.
The subscription: messages delivered as they are read, a silent Redis noticed within the
heartbeat and its PONG's bound, a lost one at once. Against real redis-server processes: paused
(SIGSTOP), killed and restarted on the same port, and one with a password and an ACL user on a
unix socket."""

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
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisError, ResponseError

from service.embedded import redis_server_binary
from service.signals.bus import WaiterHub
from service.signals.direct import (
    PUBLISH_TIMEOUT_SECONDS,
    DirectPublisher,
    DirectSubscription,
    RedisSilent,
    command,
    connection_maker,
    frames,
    publish_command,
)
from tests.signals.test_bus_logging import Records, bus_log  # noqa: F401 - the fixture
from tests.support import backends
from tests.support.faults import PrivateRedis, private_redis
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]
APP_PASSWORD = "APP-PW-7f3c"


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
            assert PUBLISH_TIMEOUT_SECONDS - 0.05 <= failed_after < PUBLISH_TIMEOUT_SECONDS + 0.8
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
    process = subprocess.Popen(
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
        with pytest.raises(ResponseError, match=r"^NOPERM"):
            await asyncio.wait_for(publisher.publish([uuid.uuid4()]), 5)
        assert publisher.connected
        with pytest.raises(ResponseError, match=r"^NOPERM"):
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


# ---- the subscription ----------------------------------------------------------------------------
MESSAGE = b"*3\r\n$7\r\nmessage\r\n$5\r\nchan1\r\n$11\r\nab cd ef 12\r\n"
CONFIRMED = b"*3\r\n$9\r\nsubscribe\r\n$5\r\nchan1\r\n:1\r\n"
PONG = b"*2\r\n$4\r\npong\r\n$17\r\nelicitd-heartbeat\r\n"


def test_replies_are_read_whole_however_the_bytes_arrive() -> None:
    stream = CONFIRMED + MESSAGE + PONG + MESSAGE
    expected = [[b"subscribe", b"chan1", 1], [b"message", b"chan1", b"ab cd ef 12"], [b"pong", b"elicitd-heartbeat"]]
    expected.append(expected[1])
    assert frames(stream) == (expected, b"")
    # One byte at a time: nothing is read before it is whole, and nothing is lost.
    found: list[object] = []
    rest = b""
    for i in range(len(stream)):
        got, rest = frames(rest + stream[i : i + 1])
        found.extend(got)
    assert (found, rest) == (expected, b"")
    # A reply cut anywhere is kept for the next read.
    assert frames(MESSAGE + MESSAGE[:20]) == ([expected[1]], MESSAGE[:20])


def test_an_error_reply_is_the_server_words_and_garbage_is_refused() -> None:
    (error,), rest = frames(b"-NOPERM this user has no permissions\r\n")
    assert isinstance(error, ResponseError) and str(error) == "NOPERM this user has no permissions"
    assert rest == b""
    for garbage in (b"+OK\r\n", b"*1\r\n+OK\r\n", b"*x\r\n", b"*1\r\n$-1\r\n"):
        with pytest.raises(InvalidResponse):
            frames(garbage)


def test_commands_are_what_redis_reads() -> None:
    assert command(b"SUBSCRIBE", b"chan1") == b"*2\r\n$9\r\nSUBSCRIBE\r\n$5\r\nchan1\r\n"


async def _subscribed(url: str, channel: str, **bounds: float) -> DirectSubscription:
    return await DirectSubscription.open(
        connection_maker(url), channel, heartbeat=bounds.get("heartbeat", 1.0), pong_timeout=bounds.get("pong", 1.0)
    )


async def test_a_subscription_delivers_each_message_as_it_is_read(backend: backends.Backends) -> None:
    channel = _channel()
    subscription = await _subscribed(backend.redis_url, channel)
    delivered: list[object] = []
    receiving = asyncio.create_task(subscription.receive(delivered.append))
    client = aioredis.Redis.from_url(backend.redis_url)
    try:
        payloads = [f"{uuid.uuid4().hex} {uuid.uuid4().hex}" for _ in range(50)] + ["x" * 70_000]
        for payload in payloads:
            assert await client.publish(channel, payload) == 1
        await until(lambda: len(delivered) == len(payloads), what="every message delivered")
        assert delivered == [p.encode() for p in payloads]
        assert not receiving.done()
    finally:
        receiving.cancel()
        await subscription.aclose()
        await client.aclose()


async def test_a_quiet_redis_is_pinged_and_a_paused_one_is_silent_within_the_bounds(
    paused_redis: PrivateRedis,
) -> None:
    subscription = await _subscribed(paused_redis.url, _channel(), heartbeat=0.2, pong=0.2)
    receiving = asyncio.create_task(subscription.receive(lambda _: None))
    try:
        await asyncio.sleep(1.2)  # quiet: five heartbeats, each PING answered
        assert not receiving.done()
        paused_redis.pause()
        started = time.monotonic()
        with pytest.raises(RedisSilent):
            await asyncio.wait_for(receiving, 3)
        # At most a heartbeat of quiet, then the PONG's bound, and the timer's turn on a busy machine.
        assert time.monotonic() - started < 0.2 + 0.2 + 0.8
    finally:
        paused_redis.resume()
        await subscription.aclose()


async def test_a_killed_redis_ends_the_subscription_at_once(paused_redis: PrivateRedis) -> None:
    subscription = await _subscribed(paused_redis.url, _channel())
    receiving = asyncio.create_task(subscription.receive(lambda _: None))
    try:
        await asyncio.sleep(0.1)
        started = time.monotonic()
        paused_redis.kill()
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(receiving, 3)
        assert time.monotonic() - started < 1.0
    finally:
        await subscription.aclose()


async def test_a_subscription_redis_refuses_is_its_error(acl_redis: Path) -> None:
    url = f"unix://app:{APP_PASSWORD}@{acl_redis}"
    with pytest.raises(ResponseError, match=r"^NOPERM"):
        await _subscribed(url, "forbidden")
    subscription = await _subscribed(url, _channel())  # its own channels are allowed
    await subscription.aclose()
