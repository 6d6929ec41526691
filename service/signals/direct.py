"""One Redis server, spoken to directly: the connections of ``SingleRedis`` (``transport``).

redis-py makes and authenticates each connection — TCP, TLS or a unix socket, a user and
password, as the URL says — and then hands its two streams over. From there elicitd writes the
few commands it sends (``PUBLISH``, ``SUBSCRIBE``, ``PING``) as RESP bytes and reads the replies
itself: a completion's wake-up leaves in the loop turn of the call that announces it, and a
message reaching a subscription wakes its waiters in the read that received it. Through redis-py's
client a wake-up waited for the announcing request to finish, then for the publishing task's turn,
and each message cost its subscriber ~120-140 µs of CPU (its command, retry and timeout layers and
a dict per message) where reading it here costs ~45-50 µs (``bench/README.md``).

A Redis Cluster still goes through redis-py (``ClusterRedis``): it routes by slot and follows
the topology, which is not worth restating.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisError, ResponseError

CONNECT_TIMEOUT_SECONDS = 1.0  # connect, handshake and the subscription's confirmation
PUBLISH_TIMEOUT_SECONDS = 0.5  # for Redis to answer one write of PUBLISH commands
IDS_PER_MESSAGE = 100  # ~3.3 KB of payload
HEARTBEAT = b"elicitd-heartbeat"
_READ_SIZE = 65536

Deliver = Callable[[object], None]


def messages(ids: Sequence[uuid.UUID]) -> Iterator[str]:
    """The payloads that carry ``ids``: up to ``IDS_PER_MESSAGE`` hex ids each, space-separated."""
    for start in range(0, len(ids), IDS_PER_MESSAGE):
        yield " ".join(flow_id.hex for flow_id in ids[start : start + IDS_PER_MESSAGE])


class RedisSilent(TimeoutError):
    """The subscription sent a PING and heard nothing back in time."""


def bounded(socket_timeout: float, *, unix: bool = False) -> dict[str, Any]:
    """redis-py options for a connection whose every call is bounded and never retried by
    redis-py itself: a retry is ours to decide (the listener reconnects with backoff; a failed
    publish is dropped)."""
    bounds: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "retry": Retry(NoBackoff(), 0),
    }
    if not unix:  # TCP keepalive; a unix socket's connection refuses the option
        bounds["socket_keepalive"] = True
    return bounds


def connection_maker(url: str) -> Callable[[], AbstractConnection]:
    """Makes unconnected redis-py connections to the URL's server. RESP2: a ``PUBLISH`` reply is
    ``:<n>``, and a subscription's messages are arrays of bulk strings. The pool only makes
    connections; it never lends one."""
    unix = url.lower().startswith("unix:")
    pool = aioredis.ConnectionPool.from_url(url, protocol=2, **bounded(CONNECT_TIMEOUT_SECONDS, unix=unix))
    return pool.make_connection


async def open_streams(make: Callable[[], AbstractConnection]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connected, authenticated connection's streams, within ``CONNECT_TIMEOUT_SECONDS``."""
    connection = make()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            await connection.connect()  # type: ignore[no-untyped-call]
    except BaseException:
        with contextlib.suppress(Exception):
            await connection.disconnect(nowait=True)
        raise
    # The streams are ours from here on: redis-py's connection object is let go (it would
    # otherwise warn of an unclosed connection when collected).
    reader, writer = connection._reader, connection._writer
    connection._reader = connection._writer = None
    if reader is None or writer is None:
        raise RedisConnectionError("the connection closed while it was made")
    return reader, writer


def command(*args: bytes) -> bytes:
    """A command in RESP, as redis-py would pack it."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


def publish_command(channel: bytes, payload: str) -> bytes:
    """``PUBLISH channel payload``."""
    return command(b"PUBLISH", channel, payload.encode("ascii"))


class _Sent:
    """One write of ``PUBLISH`` commands: how many replies it still waits for, and by when."""

    __slots__ = ("deadline", "future", "left")

    def __init__(self, left: int, future: asyncio.Future[None], deadline: float) -> None:
        self.left = left
        self.future = future
        self.deadline = deadline


class DirectPublisher:
    """``PUBLISH`` written on one connection by the call that announces, in the same loop turn.

    One task reads the replies (``:<subscribers>``). Each write is a future settled by its replies: every
    write must be answered within ``PUBLISH_TIMEOUT_SECONDS`` or the connection is cut and every
    write still waiting fails (a paused Redis, a silent network). A lost connection fails what it
    carried the same way. ``send`` then returns None until ``connect`` made a new one: the caller
    queues the ids and its publishing task reconnects.
    """

    def __init__(self, url: str, *, channel: str) -> None:
        self._make = connection_maker(url)
        self._channel = channel.encode()
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._sent: collections.deque[_Sent] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._connecting: asyncio.Lock | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def send(self, ids: Sequence[uuid.UUID]) -> asyncio.Future[None] | None:
        """Write the ids' messages now; the future settles when Redis answered them all (or
        raises ``RedisError``/``TimeoutError``). None when there is no connection to write on."""
        writer = self._writer
        if writer is None:
            return None
        if writer.transport.is_closing():  # lost, and the reading task has not seen it yet
            self._drop(RedisConnectionError("the publishing connection was lost"))
            return None
        loop = asyncio.get_running_loop()
        count = 0
        data = []
        for payload in messages(ids):
            data.append(publish_command(self._channel, payload))
            count += 1
        future: asyncio.Future[None] = loop.create_future()
        if count == 0:
            future.set_result(None)
            return future
        writer.write(b"".join(data))
        self._sent.append(_Sent(count, future, loop.time() + PUBLISH_TIMEOUT_SECONDS))
        if self._timer is None:
            self._timer = loop.call_at(self._sent[0].deadline, self._check)
        return future

    async def publish(self, ids: Sequence[uuid.UUID]) -> None:
        """Connect if there is no connection, send, and wait for Redis's replies."""
        future = self.send(ids)
        if future is None:
            await self.connect()
            future = self.send(ids)
            if future is None:  # lost again between connecting and sending
                raise RedisConnectionError("the publishing connection was lost")
        await future

    async def connect(self) -> None:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            reader, writer = await open_streams(self._make)
            self._writer = writer
            self._reading = asyncio.get_running_loop().create_task(
                self._read(reader, writer), name="elicitd-redis-publish-replies"
            )

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        failure: RedisError = RedisConnectionError("the publishing connection was lost")
        try:
            while True:
                line = await reader.readuntil(b"\r\n")
                if writer is not self._writer:
                    return
                kind = line[:1]
                if kind not in (b":", b"-") or not self._sent:
                    failure = RedisConnectionError("unexpected reply on the publishing connection")
                    return
                sent = self._sent[0]
                if kind == b"-" and not sent.future.done():
                    # The server's own words (e.g. NOAUTH, a READONLY replica): never a secret.
                    sent.future.set_exception(ResponseError(line[1:-2].decode("utf-8", "replace")))
                sent.left -= 1
                if sent.left == 0:
                    self._sent.popleft()
                    if not sent.future.done():
                        sent.future.set_result(None)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if writer is self._writer:
                self._drop(failure)

    def _check(self) -> None:
        """The oldest write's replies are overdue: Redis is not answering on this connection."""
        self._timer = None
        if not self._sent:
            return
        loop = asyncio.get_running_loop()
        if self._sent[0].deadline <= loop.time():
            self._drop(TimeoutError("redis did not answer the publish in time"))
        else:
            self._timer = loop.call_at(self._sent[0].deadline, self._check)

    def _drop(self, failure: BaseException) -> None:
        """Forget the connection (cut, not closed politely: the peer may be hung) and fail every
        write still waiting for an answer on it."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.transport.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sent, self._sent = self._sent, collections.deque()
        for entry in sent:
            if not entry.future.done():
                entry.future.set_exception(failure)
                # A write whose failure nobody awaits (the hub counts it in a done callback) must
                # not be reported as "exception never retrieved".
                entry.future.exception()
        reading, self._reading = self._reading, None
        if reading is not None and reading is not asyncio.current_task():
            reading.cancel()

    async def aclose(self) -> None:
        """Close once what was written is answered (a command's last wake-up must leave before
        the process ends), within ``PUBLISH_TIMEOUT_SECONDS``."""
        if self._sent:
            await asyncio.wait([entry.future for entry in self._sent], timeout=PUBLISH_TIMEOUT_SECONDS)
        reading = self._reading
        self._drop(RedisConnectionError("the publisher is closed"))
        if reading is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading


Frame = list[bytes | int]


def frames(buffer: bytes) -> tuple[list[Frame | ResponseError], bytes]:
    """The complete replies at the start of ``buffer`` (arrays of bulk strings and integers, or
    errors), and the bytes after them: the start of a reply still arriving."""
    found: list[Frame | ResponseError] = []
    pos = 0
    while pos < len(buffer):
        try:
            parsed = _frame(buffer, pos)
        except ValueError:
            raise InvalidResponse("unreadable reply on the subscription") from None
        if parsed is None:
            break
        frame, pos = parsed
        found.append(frame)
    return found, buffer[pos:]


def _frame(buffer: bytes, pos: int) -> tuple[Frame | ResponseError, int] | None:
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        return None
    kind = buffer[pos]
    if kind == 0x2D:  # "-": the server's own words (e.g. NOPERM): never a secret
        return ResponseError(buffer[pos + 1 : end].decode("utf-8", "replace")), end + 2
    if kind != 0x2A:  # "*"
        raise InvalidResponse("unexpected reply on the subscription")
    count = int(buffer[pos + 1 : end])
    pos = end + 2
    items: Frame = []
    for _ in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None
        kind = buffer[pos]
        if kind == 0x24:  # "$"
            length = int(buffer[pos + 1 : end])
            if length < 0:
                raise InvalidResponse("unexpected reply on the subscription")
            start, stop = end + 2, end + 2 + length
            if stop + 2 > len(buffer):
                return None
            items.append(buffer[start:stop])
            pos = stop + 2
        elif kind == 0x3A:  # ":"
            items.append(int(buffer[pos + 1 : end]))
            pos = end + 2
        else:
            raise InvalidResponse("unexpected reply on the subscription")
    return items, pos


class DirectSubscription:
    """A process's ``SUBSCRIBE`` connection: each read hands its messages' payloads to ``deliver``.

    Subscribed only once Redis confirmed it (a connection accepted by a paused Redis's kernel is no
    subscription). Any bytes from Redis show it is there; after ``heartbeat`` seconds without any,
    a PING must be answered within ``pong_timeout`` (the PONG arrives behind anything published
    before it), or the connection is cut and ``receive`` raises ``RedisSilent``. A timer watches
    this, so a read costs no timeout of its own.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, heartbeat: float, pong_timeout: float
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.heartbeat = heartbeat
        self.pong_timeout = pong_timeout
        self._rest = b""
        self._early: list[Frame] = []  # what came after the confirmation in the same read
        self._heard = 0.0
        self._pinged: float | None = None
        self._silent = False
        self._watchdog: asyncio.TimerHandle | None = None

    @classmethod
    async def open(
        cls, make: Callable[[], AbstractConnection], channel: str, *, heartbeat: float, pong_timeout: float
    ) -> DirectSubscription:
        reader, writer = await open_streams(make)
        subscription = cls(reader, writer, heartbeat=heartbeat, pong_timeout=pong_timeout)
        try:
            writer.write(command(b"SUBSCRIBE", channel.encode()))
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                while True:
                    received = subscription._frames(await reader.read(_READ_SIZE))
                    for i, frame in enumerate(received):
                        if frame[0] == b"subscribe":
                            subscription._early = received[i + 1 :]
                            return subscription
        except BaseException:
            await subscription.aclose()
            raise

    def _frames(self, data: bytes) -> list[Frame]:
        if not data:
            raise RedisConnectionError("redis closed the subscription connection")
        found, self._rest = frames(self._rest + data if self._rest else data)
        for frame in found:
            if isinstance(frame, ResponseError):
                raise frame
        return found  # type: ignore[return-value]  # the errors were raised above

    async def receive(self, deliver: Deliver) -> None:
        loop = asyncio.get_running_loop()
        self._heard = loop.time()
        self._watchdog = loop.call_at(self._heard + self.heartbeat, self._watch)
        try:
            received, self._early = self._early, []
            while True:
                for frame in received:
                    if frame[0] == b"message" and len(frame) == 3:
                        deliver(frame[2])
                    # the rest (the confirmation, a PONG) only shows that Redis is there
                data = await self._reader.read(_READ_SIZE)
                if self._silent:
                    raise RedisSilent
                self._heard = loop.time()
                received = self._frames(data)
        except OSError as exc:
            if self._silent or isinstance(exc, RedisSilent):
                raise RedisSilent from None
            raise RedisConnectionError("the subscription connection was lost") from exc
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None

    def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._pinged is not None and self._heard < self._pinged:  # a PING is unanswered
            if now >= self._pinged + self.pong_timeout:
                self._silent = True
                self._writer.transport.abort()  # the read returns; ``receive`` raises RedisSilent
                self._watchdog = None
                return
            due = self._pinged + self.pong_timeout
        elif now >= self._heard + self.heartbeat:
            if self._writer.transport.is_closing():  # lost: the read is ending the subscription
                self._watchdog = None
                return
            self._writer.write(command(b"PING", HEARTBEAT))
            self._pinged = now
            due = now + self.pong_timeout
        else:
            self._pinged = None
            due = self._heard + self.heartbeat
        self._watchdog = loop.call_at(due, self._watch)

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._writer.transport.abort()  # cut, not closed politely: the peer may be hung
