"""Wake-ups for waiting retries (DESIGN §6).

PostgreSQL is the only source of truth; this module only shortens waits. Each process holds one
Redis subscription and fans each message out to its in-process waiters, so 10,000 waiters cost
10,000 small ``asyncio.Event`` objects, not 10,000 connections.

Nothing can be lost:

* a waiter registers *before* it reads the flow, so an event published between its read and its
  wait still finds it;
* when the subscription drops, every waiter is woken (to re-read) and the hub switches to polling:
  one query per tick for all waited ids of this process, not one per waiter;
* when it comes back, every waiter is woken again, because events sent during the gap are gone;
* while healthy, a slow safety poll still catches a publish lost between commit and Redis.

A Redis that hangs (paused, or its network silently gone) is noticed, not waited for:

* the subscription is healthy only while Redis answers: when the channel is quiet it sends a PING
  every ``heartbeat`` seconds and must hear back within ``pong_timeout``, so a silent Redis moves
  the process to polling within the poll interval (both are half of it, at most 1 s each), and a
  Redis that answers again is subscribed to within ``RECONNECT_MAX_SECONDS``;
* publishing never makes a request wait for Redis: ``publish`` wakes this process's waiters and
  writes the ids on the transport's publishing connection at once when it has one and nothing is
  queued (one Redis; the write does not wait for the answer), else queues them (at most
  ``PUBLISH_QUEUE_LIMIT``) for one task that sends them in pipelined batches. Either way each
  batch must be answered within ``PUBLISH_TIMEOUT_SECONDS``; one that fails is dropped and
  counted: the transition is already committed, and waiters elsewhere find it by polling;
* every Redis call has a socket timeout and no retries of redis-py's own (its default retries a
  timed-out command three times with backoff, which is what made a completion wait 2 s before).

Which Redis carries the wake-ups is the transport's business (``service.signals.transport``): one
server, or a Redis Cluster over shard channels with one subscription connection per master. The
hub sees one subscription either way: healthy while all of it is confirmed and answering.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from redis.exceptions import RedisError

from service.clock import Clock, SystemClock
from service.settings import DEFAULT_REDIS_SHARDS
from service.signals.direct import CONNECT_TIMEOUT_SECONDS, PUBLISH_TIMEOUT_SECONDS, RedisSilent
from service.signals.transport import Subscription, Transport, transport_for

logger = logging.getLogger("elicitd.signals")
# Redis's own troubles, apart from the PostgreSQL poll's: ``service.logs`` folds a database outage
# on ``elicitd.signals`` into one warning, and a Redis timeout must not be told as one.
redis_logger = logging.getLogger("elicitd.signals.redis")

# Given the ids this process waits on, return those that are terminal or due to expire.
FinishedLookup = Callable[[list[uuid.UUID]], Awaitable[Iterable[uuid.UUID]]]


TIMEOUT_SLOT_SECONDS = 0.05

# Redis I/O bounds (``CONNECT_TIMEOUT_SECONDS``, ``PUBLISH_TIMEOUT_SECONDS``, in ``direct``) run
# on the event loop's clock (``asyncio.timeout`` and socket timeouts), not the injected one: they
# bound another process, which a test cannot speed up.
__all__ = ["CONNECT_TIMEOUT_SECONDS", "PUBLISH_TIMEOUT_SECONDS", "RedisSilent", "Waiter", "WaiterHub"]
PUBLISH_BATCH = 500
# Ids queued for Redis while it is slow or away; more are dropped (and counted), never waited for.
PUBLISH_QUEUE_LIMIT = 10_000
RECONNECT_MIN_SECONDS = 0.1
RECONNECT_MAX_SECONDS = 1.0


def _settle(future: asyncio.Future[bool], woken: bool) -> None:
    if not future.done():
        future.set_result(woken)


class Waiter:
    """One registered interest in a flow. ``wait`` returns on a wake-up or after ``timeout``."""

    # A flag plus one bare future per wait, not an ``asyncio.Event`` + ``asyncio.timeout``: an Event
    # allocates a deque (about 1 KB with its first block) and is idle for most of a long-poll;
    # with 10,000 parked requests per process that is memory spent on nothing.
    __slots__ = ("_future", "_hub", "_woken", "flow_id")

    def __init__(self, hub: WaiterHub, flow_id: uuid.UUID) -> None:
        self._hub = hub
        self.flow_id = flow_id
        self._woken = False
        self._future: asyncio.Future[bool] | None = None

    def close(self) -> None:
        """No longer registered: wake-ups for the flow pass this waiter by. Closing twice is harmless."""
        self._hub._remove(self)

    # Registered by ``WaiterHub.register`` already; ``with hub.register(flow_id) as waiter`` closes
    # it on the way out, with no generator-based context manager kept alive per parked request.
    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def wait(self, timeout: float) -> bool:
        """True when woken (something may have changed), False on timeout."""
        if timeout <= 0:
            return False
        if self._woken:  # woken between two waits: report it at once, as a set Event would
            self._woken = False
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._future = future
        slot = self._hub._arm(future, timeout)
        try:
            return await future
        finally:
            self._hub._disarm(slot, future)
            self._future = None
            self._woken = False

    def wake(self) -> None:
        self._woken = True
        if self._future is not None:
            _settle(self._future, True)

    def tick(self, remaining: float) -> float:
        """How long to sleep next: the whole remaining time while Redis delivers, else a poll tick."""
        return remaining if self._hub.healthy else min(remaining, self._hub.poll_interval)


class WaiterHub:
    """In-process registry of waiters, fed by one Redis subscription and a batched poller."""

    def __init__(
        self,
        *,
        redis_url: str | None,
        channel: str,
        poll_interval: float,
        safety_poll_interval: float,
        finished: FinishedLookup,
        clock: Clock | None = None,
        shards: int = DEFAULT_REDIS_SHARDS,
    ) -> None:
        self._redis_url = redis_url
        self.shards = shards  # shard channels on a Redis Cluster; one Redis ignores it
        # Wait timeouts, poll ticks and reconnect backoff run on this clock; Redis I/O timeouts do not.
        self._clock: Clock = clock or SystemClock()
        self.channel = channel
        self.poll_interval = poll_interval
        self.safety_poll_interval = safety_poll_interval
        self._finished = finished
        # A list per flow: almost always one waiter, and a one-item list is a third of a set.
        self._waiters: dict[uuid.UUID, list[Waiter]] = {}
        self._healthy = False
        # Why the subscription is down (an exception's type name: no address, no password), or None.
        self._failure: str | None = None if redis_url is not None else "not configured"
        # Half the poll interval each, so a silent Redis is noticed within one poll interval.
        self.heartbeat = min(1.0, max(0.1, poll_interval / 2))
        self.pong_timeout = min(1.0, max(0.25, poll_interval / 2))
        self._transport: Transport | None = None
        self._outbox: collections.deque[uuid.UUID] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._publish_task: asyncio.Task[None] | None = None
        self._first_attempt = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # Timeouts of parked waits, by 50 ms slot: one loop timer per slot rather than one timer
        # handle (with its context copy and libuv timer, ~0.6 KB) per parked request.
        self._timeouts: dict[int, dict[int, asyncio.Future[bool]]] = {}
        self.published = 0
        self.publish_failures = 0  # ids whose batch Redis did not take in time
        self.publish_dropped = 0  # ids never sent because the queue was full
        self._failing = False  # the last batch failed: the next failure is not logged again
        self.received = 0  # ids that came through Redis

    # ---- state -----------------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self._healthy

    @property
    def redis_configured(self) -> bool:
        return self._redis_url is not None

    @property
    def redis_failure(self) -> str | None:
        """Why wake-ups are not on Redis (safe to log), or None while the subscription is healthy."""
        return None if self._healthy else (self._failure or "not connected")

    @property
    def publish_backlog(self) -> int:
        return len(self._outbox)

    @property
    def waiter_count(self) -> int:
        return sum(len(s) for s in self._waiters.values())

    def waiters_on(self, flow_id: uuid.UUID) -> int:
        """How many requests of this process are parked on the flow: a caller can tell a long-poll
        that is waiting from one that has not arrived yet, without timing it."""
        return len(self._waiters.get(flow_id, ()))

    def _set_health(self, healthy: bool) -> None:
        if healthy != self._healthy:
            self._healthy = healthy
            if healthy:
                redis_logger.info("redis signal bus connected")
            elif self._stopping:
                # Our own shutdown (the app stopping, a CLI command ending) closed the subscription:
                # nothing is wrong, and a warning on every clean exit would teach people to ignore it.
                redis_logger.debug("redis signal bus closed")
            else:
                redis_logger.warning("redis signal bus unavailable: waiters poll PostgreSQL")
            self.wake_all()

    # ---- waiters ---------------------------------------------------------------------------------
    def register(self, flow_id: uuid.UUID) -> Waiter:
        """A waiter registered now, until its ``close()`` (or the end of ``with hub.register(…) as
        waiter``): a change published from here on wakes it, so a read after this cannot miss one."""
        waiter = Waiter(self, flow_id)
        self._add(waiter)
        return waiter

    def _add(self, waiter: Waiter) -> None:
        group = self._waiters.get(waiter.flow_id)
        if group is None:
            self._waiters[waiter.flow_id] = [waiter]
        else:
            group.append(waiter)

    def _remove(self, waiter: Waiter) -> None:
        group = self._waiters.get(waiter.flow_id)
        if group is not None:
            with contextlib.suppress(ValueError):
                group.remove(waiter)
            if not group:
                del self._waiters[waiter.flow_id]

    def _arm(self, future: asyncio.Future[bool], timeout: float) -> int:
        """Settle ``future`` with False at most ``TIMEOUT_SLOT_SECONDS`` after ``timeout``."""
        now = self._clock.monotonic()
        slot = math.ceil((now + timeout) / TIMEOUT_SLOT_SECONDS)
        group = self._timeouts.get(slot)
        if group is None:
            group = self._timeouts[slot] = {}
            self._clock.call_later(slot * TIMEOUT_SLOT_SECONDS - now, functools.partial(self._expire, slot))
        group[id(future)] = future
        return slot

    def _disarm(self, slot: int, future: asyncio.Future[bool]) -> None:
        group = self._timeouts.get(slot)
        if group is not None:
            group.pop(id(future), None)

    def _expire(self, slot: int) -> None:
        for future in (self._timeouts.pop(slot, None) or {}).values():
            _settle(future, False)

    def wake(self, flow_id: uuid.UUID) -> None:
        for waiter in self._waiters.get(flow_id, ()):
            waiter.wake()

    def wake_all(self) -> None:
        for group in self._waiters.values():
            for waiter in group:
                waiter.wake()

    # ---- publishing ------------------------------------------------------------------------------
    async def publish(self, flow_ids: Iterable[uuid.UUID]) -> None:
        """Call only after the transition committed. Wakes this process's waiters at once and
        queues the ids for Redis; it never waits for Redis and never raises."""
        ids = list(flow_ids)
        for flow_id in ids:
            self.wake(flow_id)
        if self._transport is None or not ids:
            return
        if not self._outbox:  # nothing queued before these: write them now, in this loop turn
            sent = self._transport.send(ids)
            if sent is not None:
                sent.add_done_callback(functools.partial(self._sent, len(ids)))
                return
        room = max(0, PUBLISH_QUEUE_LIMIT - len(self._outbox))
        if room < len(ids):
            self.publish_dropped += len(ids) - room
            ids = ids[:room]
        self._outbox.extend(ids)
        self._outbox_ready.set()

    async def _publish_queued(self) -> None:
        """Send queued ids in batches until the queue is empty and the hub is stopping."""
        assert self._transport is not None
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            while self._outbox:
                batch = [self._outbox.popleft() for _ in range(min(PUBLISH_BATCH, len(self._outbox)))]
                try:
                    async with asyncio.timeout(PUBLISH_TIMEOUT_SECONDS):
                        await self._transport.publish(batch)
                except (RedisError, OSError) as exc:  # TimeoutError is an OSError
                    self._count(len(batch), exc)
                else:
                    self._count(len(batch), None)
            if self._stopping:
                return

    def _sent(self, count: int, future: asyncio.Future[None]) -> None:
        """A batch written by ``publish`` itself was answered, or failed."""
        self._count(count, None if future.cancelled() else future.exception())

    def _count(self, count: int, failure: BaseException | None) -> None:
        if failure is None:
            self.published += count
            self._failing = False
            return
        self.publish_failures += count
        # Once per run of failures: Redis being away is already said by the listener.
        if not self._failing:
            redis_logger.warning(
                "publish failed; waiters elsewhere will poll", extra={"error_type": type(failure).__name__}
            )
        self._failing = True

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the listener, the publisher and the poller; return once the first subscription
        attempt has succeeded or failed (bounded), so a new process reports its real state."""
        if self._redis_url is not None:
            self._transport = transport_for(
                self._redis_url,
                channel=self.channel,
                shards=self.shards,
                heartbeat=self.heartbeat,
                pong_timeout=self.pong_timeout,
            )
            self._publish_task = asyncio.create_task(self._publish_queued(), name="elicitd-redis-publisher")
            self._tasks.append(asyncio.create_task(self._listen(), name="elicitd-redis-listener"))
        self._tasks.append(asyncio.create_task(self._poll(), name="elicitd-waiter-poller"))
        if self._redis_url is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._first_attempt.wait(), timeout=2 * CONNECT_TIMEOUT_SECONDS)

    async def stop(self) -> None:
        self._stopping = True
        if self._publish_task is not None:
            # What is queued still goes out (a command's cancel must wake waiters elsewhere), but
            # a Redis that does not take it cannot hold the stop up.
            self._outbox_ready.set()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._publish_task, timeout=2 * PUBLISH_TIMEOUT_SECONDS)
            self._publish_task = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._transport is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._transport.aclose(), timeout=CONNECT_TIMEOUT_SECONDS)
        self.wake_all()

    async def _listen(self) -> None:
        assert self._transport is not None
        backoff = RECONNECT_MIN_SECONDS
        while not self._stopping:
            subscription: Subscription | None = None
            try:
                subscription = await self._transport.subscribe()
                self._failure = None
                self._set_health(True)
                self._first_attempt.set()
                backoff = RECONNECT_MIN_SECONDS
                await subscription.receive(self._receive_one)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:  # TimeoutError and RedisSilent are OSErrors
                self._failure = type(exc).__name__
                redis_logger.debug("redis listener error", extra={"error_type": self._failure})
            finally:
                self._set_health(False)
                if subscription is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(subscription.aclose(), timeout=CONNECT_TIMEOUT_SECONDS)
            self._first_attempt.set()
            await self._clock.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_SECONDS)

    def _receive_one(self, data: object) -> None:
        self.received += self._dispatch(data)

    def _dispatch(self, data: object) -> int:
        """Wake the waiters of each id a message carries (one or more hex ids separated by spaces,
        ``transport.messages``); what is not an id is ignored. Returns how many ids it carried."""
        if isinstance(data, bytes):
            data = data.decode("ascii", "replace")
        if not isinstance(data, str):
            return 0
        carried = 0
        for token in data.split():
            try:
                flow_id = uuid.UUID(hex=token)
            except ValueError:
                continue
            carried += 1
            self.wake(flow_id)
        return carried

    async def _poll(self) -> None:
        """One query per tick for every waited flow: wakes those that finished or are due."""
        while not self._stopping:
            await self._clock.sleep(self.poll_interval if not self._healthy else self.safety_poll_interval)
            ids = list(self._waiters)
            if not ids:
                continue
            try:
                for start in range(0, len(ids), 5000):
                    for flow_id in await self._finished(ids[start : start + 5000]):
                        self.wake(flow_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the poller must outlive a database hiccup
                logger.warning("waiter poll failed", extra={"error_type": type(exc).__name__})


@contextlib.asynccontextmanager
async def running(hub: WaiterHub) -> AsyncIterator[WaiterHub]:
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()
