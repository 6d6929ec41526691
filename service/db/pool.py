"""The pool of driver connections behind the hot path's single statements (``service.db.direct``).

Every request an MCP server repeats takes one connection, runs one statement and gives it back.
Through SQLAlchemy's pool that checkout and checkin cost ~45 µs of Python per request (a greenlet
hop, a queue get under ``wait_for``, the checkout listener, the reset on return), and asyncpg's
own pool ~50 µs (a holder, a proxy, an inactivity timer per release), more than the rest of a
status read's own work. Here an idle connection is one list pop and one append (~0.2 µs).

What this pool keeps of a pool's duties, and how:

* **Bounded size, bounded wait**: at most ``size`` connections open or opening; a request beyond
  them waits in line up to ``timeout`` seconds, then gets SQLAlchemy's ``TimeoutError`` (the
  pool-timeout error, answered 503 with ``Retry-After`` as the ORM's pool-timeout is).
* **No state to reset**: single statements run outside a transaction block and set no session
  state, so a returned connection is idle as it is: no reset round trip.
* **Replacement**: a connection the server closed is skipped at checkout; one older than
  ``recycle_seconds`` is closed at checkout (below the idle timeouts of NATs and load balancers);
  ``expire()`` retires every connection opened so far (after a failover: a demoted primary keeps
  its connections open), idle ones at once and busy ones when they come back.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable

import asyncpg
from sqlalchemy.exc import TimeoutError as PoolTimeout

# How long a retired connection gets to say goodbye (PostgreSQL's Terminate message) before it is cut.
_CLOSE_SECONDS = 2.0


class _WaitExpired(Exception):
    """A request waited ``timeout`` seconds for a connection (raised as ``PoolTimeout``)."""


def _expire_wait(waiter: asyncio.Future[Pooled | None]) -> None:
    if not waiter.done():  # a connection handed over in the same instant wins
        waiter.set_exception(_WaitExpired())


class Pooled:
    """A driver connection with what the pool knows of it."""

    __slots__ = ("connection", "generation", "opened")

    def __init__(self, connection: asyncpg.Connection, generation: int, opened: float) -> None:
        self.connection = connection
        self.generation = generation
        self.opened = opened


class StatementPool:
    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        *,
        size: int,
        timeout: float,
        recycle_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one connection")
        self._connect = connect
        self._size = size
        self._timeout = timeout
        self._recycle = recycle_seconds
        self._monotonic = monotonic
        self._idle: list[Pooled] = []  # the most recently returned last: it is taken first
        # Requests waiting for a connection, first come first served. A waiter gets a connection,
        # or None when a slot freed up and it may open one itself.
        self._waiters: collections.deque[asyncio.Future[Pooled | None]] = collections.deque()
        self._open = 0  # connections open or being opened
        self._generation = 0
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def size(self) -> int:
        return self._size

    def checked_out(self) -> int:
        """Connections in use (open or being opened, and not idle)."""
        return self._open - len(self._idle)

    def idle(self) -> int:
        return len(self._idle)

    def waiting(self) -> int:
        """Requests in line for a connection."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> Pooled:
        while True:
            if self._closed:
                raise PoolTimeout("the statement pool is closed")
            while self._idle:
                pooled = self._idle.pop()
                if self._usable(pooled):
                    return pooled
                self._retire(pooled)
            if self._open < self._size:
                return await self._open_one()
            handed = await self._wait()
            if handed is not None:
                return handed
            # A slot freed up: open a connection in it, unless someone took it first.

    def release(self, pooled: Pooled, *, lost: bool = False) -> None:
        """Give a connection back. ``lost``: its server is gone or read-only; cut it, do not reuse it."""
        if lost:
            pooled.connection.terminate()
        if lost or self._closed or not self._usable(pooled):
            self._retire(pooled)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(pooled)
                return
        self._idle.append(pooled)

    def expire(self) -> None:
        """Retire every connection opened so far: idle ones now, busy ones when they are returned."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for pooled in idle:
            self._retire(pooled)

    async def close(self) -> None:
        """Close the idle connections; busy ones are closed when returned. Waiters get the timeout error."""
        self._closed = True
        self.expire()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolTimeout("the statement pool is closed"))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # ---- internals ---------------------------------------------------------------------------
    def _usable(self, pooled: Pooled) -> bool:
        return (
            pooled.generation == self._generation
            and not pooled.connection.is_closed()
            and self._monotonic() - pooled.opened < self._recycle
        )

    async def _open_one(self) -> Pooled:
        self._open += 1
        generation = self._generation
        try:
            connection = await self._connect()
        except BaseException:
            self._open -= 1
            self._hand_slot()
            raise
        return Pooled(connection, generation, self._monotonic())

    async def _wait(self) -> Pooled | None:
        # The bound is one timer that fails the waiter's future, not ``asyncio.timeout`` (which
        # cancels and uncancels the task): under 32 concurrent requests on a pool of 10 most
        # requests wait here, and the timer costs a third of what the context manager did.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Pooled | None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(self._timeout, _expire_wait, waiter)
        try:
            return await waiter
        except _WaitExpired:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            raise PoolTimeout(
                f"statement pool limit of size {self._size} reached, connection timed out, timeout {self._timeout:g}"
            ) from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()  # given to this request just as it was cancelled: pass it on
                if handed is None:
                    self._hand_slot()
                else:
                    self.release(handed)
            else:
                waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise
        finally:
            timer.cancel()

    def _retire(self, pooled: Pooled) -> None:
        self._open -= 1
        connection = pooled.connection
        if not connection.is_closed():
            task = asyncio.ensure_future(self._close_quietly(connection))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._hand_slot()

    def _hand_slot(self) -> None:
        """A connection slot is free: the first request in line may open a connection in it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @staticmethod
    async def _close_quietly(connection: asyncpg.Connection) -> None:
        try:
            await connection.close(timeout=_CLOSE_SECONDS)
        except (Exception, asyncio.CancelledError):
            connection.terminate()
