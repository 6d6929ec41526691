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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.clock import Clock, SystemClock

logger = logging.getLogger("elicitd.signals")

# Given the ids this process waits on, return those that are terminal or due to expire.
FinishedLookup = Callable[[list[uuid.UUID]], Awaitable[Iterable[uuid.UUID]]]


TIMEOUT_SLOT_SECONDS = 0.05


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

    # The waiter is its own context manager (``with hub.register(flow_id) as waiter``): no
    # generator-based context manager kept alive per parked request.
    def __enter__(self) -> Waiter:
        self._hub._add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._hub._remove(self)

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
    ) -> None:
        self._redis_url = redis_url
        # Wait timeouts, poll ticks and reconnect backoff run on this clock; Redis I/O timeouts do not.
        self._clock: Clock = clock or SystemClock()
        self.channel = channel
        self.poll_interval = poll_interval
        self.safety_poll_interval = safety_poll_interval
        self._finished = finished
        # A list per flow: almost always one waiter, and a one-item list is a third of a set.
        self._waiters: dict[uuid.UUID, list[Waiter]] = {}
        self._healthy = False
        self._publisher: aioredis.Redis | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # Timeouts of parked waits, by 50 ms slot: one loop timer per slot rather than one timer
        # handle (with its context copy and libuv timer, ~0.6 KB) per parked request.
        self._timeouts: dict[int, dict[int, asyncio.Future[bool]]] = {}
        self.published = 0
        self.publish_failures = 0
        self.received = 0

    # ---- state -----------------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self._healthy

    @property
    def redis_configured(self) -> bool:
        return self._redis_url is not None

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
                logger.info("redis signal bus connected")
            elif self._stopping:
                # Our own shutdown (the app stopping, a CLI command ending) closed the subscription:
                # nothing is wrong, and a warning on every clean exit would teach people to ignore it.
                logger.debug("redis signal bus closed")
            else:
                logger.warning("redis signal bus unavailable: waiters poll PostgreSQL")
            self.wake_all()

    # ---- waiters ---------------------------------------------------------------------------------
    def register(self, flow_id: uuid.UUID) -> Waiter:
        """``with hub.register(flow_id) as waiter``: registered on entry, removed on exit."""
        return Waiter(self, flow_id)

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
        """Call only after the transition committed. Failure is logged, never raised: the poller
        and the waiters' final read still deliver the outcome."""
        ids = list(flow_ids)
        for flow_id in ids:
            self.wake(flow_id)
        if self._publisher is None or not ids:
            return
        try:
            async with self._publisher.pipeline(transaction=False) as pipe:
                for flow_id in ids:
                    pipe.publish(self.channel, flow_id.hex)
                await pipe.execute()
            self.published += len(ids)
        except (RedisError, OSError) as exc:
            self.publish_failures += len(ids)
            logger.warning("publish failed; waiters elsewhere will poll", extra={"error_type": type(exc).__name__})

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._redis_url is not None:
            self._publisher = aioredis.Redis.from_url(self._redis_url, socket_timeout=2, socket_connect_timeout=2)
            self._tasks.append(asyncio.create_task(self._listen(), name="elicitd-redis-listener"))
        self._tasks.append(asyncio.create_task(self._poll(), name="elicitd-waiter-poller"))

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._publisher is not None:
            await self._publisher.aclose()
        self.wake_all()

    async def ping(self) -> bool:
        return await self.ping_failure() is None

    async def ping_failure(self) -> str | None:
        """Why Redis does not answer a PING (a reason safe to log: no address, no password), or
        None when it does."""
        if self._publisher is None:
            return "not connected"
        try:
            await asyncio.wait_for(self._publisher.ping(), timeout=1)
        except (RedisError, OSError, TimeoutError) as exc:
            return type(exc).__name__
        return None

    async def _listen(self) -> None:
        assert self._redis_url is not None
        backoff = 0.2
        while not self._stopping:
            client = aioredis.Redis.from_url(self._redis_url, socket_connect_timeout=2, health_check_interval=5)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._set_health(True)
                backoff = 0.2
                while not self._stopping:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is None:
                        # Quiet channel: make sure the connection is still there.
                        await pubsub.ping()
                        continue
                    self.received += 1
                    self._dispatch(message.get("data"))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, ConnectionError) as exc:
                logger.debug("redis listener error", extra={"error_type": type(exc).__name__})
            finally:
                self._set_health(False)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                with contextlib.suppress(Exception):
                    await client.aclose()
            await self._clock.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _dispatch(self, data: object) -> None:
        if isinstance(data, bytes):
            data = data.decode("ascii", "replace")
        if not isinstance(data, str):
            return
        try:
            flow_id = uuid.UUID(hex=data)
        except ValueError:
            return
        self.wake(flow_id)

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
