"""The event stream's fan-out (``GET /v1/events``): every consumer gets every event of its server
client, from PostgreSQL, in order, without loss or repeat; a slow consumer delays nobody.

PostgreSQL is the truth (``events``, numbered per server client without gaps, see
``service.events.models``); Redis only wakes. Per process and server client, one *tail* reads the
new rows once and pushes them into each consumer's bounded buffer — one query per event for all of
this process's consumers of that client, not one per consumer. The tail never waits for a
consumer: a consumer whose buffer is full is marked behind and drops what it was given, then
catches up by reading PostgreSQL at its own pace from its own position, and rejoins the live
pushes. A consumer only ever sends ``seq = position + 1``; anything else (a gap, an overflow, a
tail that started after it read) sends it back to PostgreSQL first. So neither the tail nor a
transition ever waits for a socket.

The tail learns of new rows from the waiter hub (the server client's id is published after each
commit that appended events; the same Redis subscription that wakes flow waiters carries it) and,
as a fallback, by reading every ``poll`` seconds — the hub's poll interval while Redis is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.crypto.vault import Vault
from service.db.base import CLIENT_ID
from service.errors import ElicitdError, InvalidRequest, RateLimited
from service.events import repository as repo
from service.settings import Settings, positive_extras
from service.signals.bus import WaiterHub
from service.signals.webhooks import WEBHOOK_SECRET_PURPOSE

logger = logging.getLogger("elicitd.events")


@dataclass(frozen=True, slots=True)
class EventSettings:
    """Read from ``ELICITD_EVENTS_*`` (through ``Settings.extra``) when the services are built."""

    # A comment line this often keeps proxies from closing an idle stream and tells the consumer
    # the connection is alive.
    heartbeat_seconds: float = 15.0
    # How long events stay resumable by ``Last-Event-ID``.
    retention_seconds: float = 7 * 86400.0
    # Events a consumer may have pushed to it and not yet written before it is sent back to
    # PostgreSQL to catch up.
    buffer_size: int = 256
    # While Redis wakes the tail, it still reads this often, in case a publish was lost.
    poll_seconds: float = 10.0
    page_size: int = 100
    # Streams one server client may hold open in one process (each holds a connection, a buffer
    # and a task's share of the tail): a leaked key cannot pin a replica's sockets and memory.
    streams_per_client: int = 8

    @classmethod
    def from_settings(cls, settings: Settings) -> EventSettings:
        kinds: dict[str, type[int] | type[float]] = {
            "heartbeat_seconds": float,
            "retention_seconds": float,
            "buffer_size": int,
            "poll_seconds": float,
            "page_size": int,
            "streams_per_client": int,
        }
        return cls(**positive_extras(settings, "EVENTS_", kinds))


class FlowLike(Protocol):
    @property
    def server_client_id(self) -> uuid.UUID: ...


class Subscription:
    """One consumer's bounded buffer. The tail ``push``es without ever waiting; past ``capacity``
    the consumer is marked ``behind`` and keeps nothing until it has caught up from PostgreSQL."""

    __slots__ = ("_buffer", "_clock", "_ready", "behind", "capacity")

    def __init__(self, capacity: int, clock: Clock) -> None:
        self.capacity = capacity
        self._clock = clock
        self._buffer: deque[repo.Row] = deque()
        self._ready = asyncio.Event()
        self.behind = False

    def push(self, rows: list[repo.Row]) -> None:
        if not self.behind:
            if len(self._buffer) + len(rows) > self.capacity:
                self.behind = True
                self._buffer.clear()
            else:
                self._buffer.extend(rows)
        self._ready.set()

    def poke(self) -> None:
        self._ready.set()

    def take(self) -> list[repo.Row]:
        rows = list(self._buffer)
        self._buffer.clear()
        self._ready.clear()
        return rows

    def reset(self) -> None:
        """Before a catch-up read: what is pushed from now on is kept (duplicates are skipped)."""
        self.behind = False
        self._buffer.clear()
        self._ready.clear()

    async def wait(self, timeout: float) -> bool:
        """True when something was pushed or poked, False after ``timeout`` (on the clock)."""
        if self._ready.is_set():
            return True
        ready = asyncio.ensure_future(self._ready.wait())
        tick = asyncio.ensure_future(self._clock.sleep(timeout))
        try:
            await asyncio.wait((ready, tick), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            tick.cancel()
        return self._ready.is_set()


class StreamSlot:
    """One stream's place under ``EventSettings.streams_per_client``.

    Taken by the handler before the answer starts, so that a refusal is a 429 rather than a stream
    that closes at once; held by the stream's generator, which gives it back when it ends. A
    generator that never ran (the client left before the answer started) has no ``finally`` to
    run: the hub holds slots weakly, so such a slot goes when its generator is dropped."""

    __slots__ = ("__weakref__",)


@dataclass(eq=False)
class _Tail:
    server_client_id: uuid.UUID
    subscriptions: set[Subscription] = field(default_factory=set)
    # The highest seq this tail has read and pushed (None until its first read).
    known: int | None = None
    task: asyncio.Task[None] | None = None


class EventHub:
    """One per process: tails per server client, consumers' subscriptions, wake-ups after commits."""

    def __init__(
        self,
        *,
        settings: EventSettings,
        read_sessions: async_sessionmaker[AsyncSession],
        sessions: async_sessionmaker[AsyncSession],
        hub: WaiterHub,
        vault: Vault,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.vault = vault
        self.read_sessions = read_sessions
        self.sessions = sessions
        self.hub = hub
        self.clock: Clock = clock or SystemClock()
        self._tails: dict[uuid.UUID, _Tail] = {}
        self._slots: dict[uuid.UUID, weakref.WeakSet[StreamSlot]] = {}
        self._draining = False

    def drain(self) -> None:
        """The process is stopping: every open stream ends after what it has sent, and a new one
        ends at once. A stream never ends by itself, so the server would otherwise wait for it
        until its stop ran out and cut it; ended here, its client resumes from ``Last-Event-ID``
        on another replica without losing an event."""
        self._draining = True
        for tail in self._tails.values():
            for subscription in tail.subscriptions:
                subscription.poke()

    # ---- after a commit ------------------------------------------------------------------------
    @staticmethod
    def stream_of(flow: FlowLike) -> uuid.UUID:
        """The id whose waiters a flow's transition wakes besides the flow's own: its server
        client's, whose tails read the event the transition appended. ``FlowService.announce``
        publishes it in the same message as the flow's id (one ``PUBLISH`` for both)."""
        return flow.server_client_id

    async def announce(self, server_client_ids: Iterable[uuid.UUID]) -> None:
        """After a commit that appended events (``repository.record`` returns whose): wake the
        tails of those server clients here and, through Redis, in every other process."""
        await self.hub.publish(set(server_client_ids))

    # ---- consumers -----------------------------------------------------------------------------
    def claim(self, server_client_id: uuid.UUID) -> StreamSlot:
        """A place for one more stream of this server client in this process, or ``TooManyStreams``.

        No await between the count and the add: concurrent requests of one client cannot both
        take the last place. The count is per process (each replica has its own)."""
        held = self._slots.get(server_client_id)
        if held is None:
            held = self._slots[server_client_id] = weakref.WeakSet()
        if len(held) >= self.settings.streams_per_client:
            # A consumer that went away unannounced is found out at its next heartbeat at the latest.
            raise TooManyStreams(
                f"This server client already holds {self.settings.streams_per_client} event streams "
                "on this replica; close one or retry later.",
                retry_after=math.ceil(self.settings.heartbeat_seconds),
            )
        slot = StreamSlot()
        held.add(slot)
        return slot

    def release(self, server_client_id: uuid.UUID, slot: StreamSlot) -> None:
        held = self._slots.get(server_client_id)
        if held is not None:
            held.discard(slot)
            if not held:
                del self._slots[server_client_id]

    def streams_of(self, server_client_id: uuid.UUID) -> int:
        """Streams of this server client open (or opening) in this process."""
        held = self._slots.get(server_client_id)
        return len(held) if held is not None else 0

    async def start(self, server_client_id: uuid.UUID, after: int | None) -> int:
        """Where a stream starts: after ``after`` (the consumer's ``Last-Event-ID``) when it is
        still resumable, or after the latest event when it gave none. Raises ``EventsExpired`` when
        events after ``after`` were already purged and ``InvalidCursor`` when ``after`` is ahead."""
        async with self.read_sessions() as session:
            last, first = await repo.position(session, server_client_id)
        if after is None:
            return last
        if after > last:
            raise InvalidCursor(f"Last-Event-ID {after} is ahead of this stream (its last event is {last}).")
        if after < last and (first is None or first > after + 1):
            raise EventsExpired(
                "Events after this Last-Event-ID are past the retention window; start a new stream without it."
            )
        return after

    async def signing_secret(self, server_client_id: uuid.UUID) -> str | None:
        """The webhook signing secret events of this client are signed with (None when unset)."""
        async with self.read_sessions() as session:
            sealed = await repo.signing_secret_blob(session, server_client_id)
        if sealed is None:
            return None
        key_id, blob = sealed
        return self.vault.decrypt_text(
            key_id, blob, owner=CLIENT_ID.format(server_client_id), purpose=WEBHOOK_SECRET_PURPOSE
        )

    async def stream(self, server_client_id: uuid.UUID, after: int) -> AsyncGenerator[list[repo.Row] | None]:
        """Every event after ``after``, in order, as batches; ``None`` when a heartbeat is due."""
        async with self._subscribe(server_client_id) as (subscription, tail):
            position = after
            while not self._draining:
                # Catch up from PostgreSQL. The subscription is registered and reset first, so an
                # event committed meanwhile is either read here or pushed (and skipped if both).
                subscription.reset()
                while True:
                    async with self.read_sessions() as session:
                        rows = await repo.page(session, server_client_id, position, self.settings.page_size)
                    if rows:
                        position = rows[-1].seq
                        yield rows
                    if len(rows) < self.settings.page_size:
                        break
                # Live: what the tail pushes, while it continues this consumer's sequence.
                while True:
                    if not await subscription.wait(self.settings.heartbeat_seconds):
                        yield None
                        continue
                    if self._draining:
                        return
                    if subscription.behind:
                        break
                    rows = [row for row in subscription.take() if row.seq > position]
                    if rows and rows[0].seq != position + 1:
                        break
                    if not rows and tail.known is not None and tail.known > position:
                        break
                    if rows:
                        position = rows[-1].seq
                        yield rows

    @contextlib.asynccontextmanager
    async def _subscribe(self, server_client_id: uuid.UUID) -> AsyncIterator[tuple[Subscription, _Tail]]:
        subscription = Subscription(self.settings.buffer_size, self.clock)
        tail = self._tails.get(server_client_id)
        if tail is None:
            tail = self._tails[server_client_id] = _Tail(server_client_id)
        tail.subscriptions.add(subscription)
        if tail.task is None:
            tail.task = asyncio.get_running_loop().create_task(
                self._run_tail(tail), name=f"elicitd-events-tail-{server_client_id.hex[:8]}"
            )
        try:
            yield subscription, tail
        finally:
            tail.subscriptions.discard(subscription)
            if not tail.subscriptions:
                self._tails.pop(server_client_id, None)
                if tail.task is not None:
                    tail.task.cancel()

    @property
    def consumers(self) -> int:
        """Streams open in this process (for metrics and tests)."""
        return sum(len(t.subscriptions) for t in self._tails.values())

    def consumers_of(self, server_client_id: uuid.UUID) -> int:
        tail = self._tails.get(server_client_id)
        return len(tail.subscriptions) if tail is not None else 0

    # ---- the tail --------------------------------------------------------------------------------
    async def _run_tail(self, tail: _Tail) -> None:
        with self.hub.register(tail.server_client_id) as waiter:
            while tail.subscriptions:
                try:
                    full = await self._read_tail(tail)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a database hiccup: consumers keep their place, retry
                    logger.warning("event tail read failed", extra={"error_type": type(exc).__name__})
                    full = False
                if full:
                    await asyncio.sleep(0)
                    continue
                await waiter.wait(self.hub.poll_interval if not self.hub.healthy else self.settings.poll_seconds)

    async def _read_tail(self, tail: _Tail) -> bool:
        """Read what is new and push it; True when a whole page came (read again at once)."""
        async with self.read_sessions() as session:
            if tail.known is None:
                tail.known = await repo.last_seq(session, tail.server_client_id)
                # Consumers that read less than this before the tail started must catch up.
                for subscription in tail.subscriptions:
                    subscription.poke()
                return False
            rows = await repo.page(session, tail.server_client_id, tail.known, self.settings.page_size)
        if rows:
            tail.known = rows[-1].seq
            for subscription in tail.subscriptions:
                subscription.push(rows)
        return len(rows) >= self.settings.page_size

    # ---- upkeep ----------------------------------------------------------------------------------
    async def purge(self, session: AsyncSession) -> int:
        """A sweeper chore: drop events past the retention window (in bounded batches)."""
        return await repo.purge(session, self.settings.retention_seconds)

    async def aclose(self) -> None:
        for tail in list(self._tails.values()):
            if tail.task is not None:
                tail.task.cancel()
        for task in [t.task for t in self._tails.values() if t.task is not None]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tails.clear()


class EventsExpired(ElicitdError):
    """``Last-Event-ID`` names a position whose following events were purged."""

    code = "events_expired"
    status = 410
    title = "Events expired"


class TooManyStreams(RateLimited):
    """The server client holds ``EventSettings.streams_per_client`` streams in this process."""

    code = "too_many_streams"


class InvalidCursor(InvalidRequest):
    """``Last-Event-ID`` is not a position of this stream."""

    code = "invalid_last_event_id"
