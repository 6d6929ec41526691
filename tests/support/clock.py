"""``ManualClock``: a ``service.clock.Clock`` that moves only when a test moves it.

Give it to ``running_app(settings, clock=...)`` (or any service's constructor) and time-driven
behaviour happens exactly when the test says so: ``advance(30)`` releases every ``sleep`` and timer
due within those 30 seconds, in deadline order; until then none of them fires, however long the
test takes. A test can therefore prove that something did *not* happen before a deadline without
sleeping through it.

The wall clock (``time()``, ``now()``) starts at the real time and moves with ``advance``, so values
compared with the database's timestamps stay plausible. The database's own ``now()`` does not move:
expiry decided in SQL is tested by moving the stored timestamps instead.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime


class ManualTimer:
    __slots__ = ("callback", "cancelled", "deadline", "loop")

    def __init__(self, deadline: float, callback: Callable[[], object], loop: asyncio.AbstractEventLoop) -> None:
        self.deadline = deadline
        self.callback = callback
        self.loop = loop
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, *, wall: float | None = None) -> None:
        # Any origin will do for the monotonic clock; a large one catches code that treats it as 0.
        self._monotonic = 10_000.0
        self._wall = time.time() if wall is None else wall
        self._timers: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._wall

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._wall, tz=UTC)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # one loop turn, as asyncio.sleep(0) gives
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def release() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_later(seconds, release)
        try:
            await future
        finally:
            timer.cancel()

    def call_later(self, seconds: float, callback: Callable[[], object]) -> ManualTimer:
        timer = ManualTimer(self._monotonic + max(0.0, seconds), callback, asyncio.get_running_loop())
        heapq.heappush(self._timers, (timer.deadline, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``; every timer due by then fires, earliest first.

        Callbacks run on their loop right after this returns (as a real timer's run when the loop
        gets to them), so a sleeper released here has not resumed yet: wait for what it does."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        target = self._monotonic + seconds
        while self._timers and self._timers[0][0] <= target:
            deadline, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._move(deadline - self._monotonic)
            timer.loop.call_soon(timer.callback)
        self._move(target - self._monotonic)

    def deadlines(self) -> list[float]:
        """Seconds from now until each armed timer fires, soonest first (what ``advance`` would release)."""
        return sorted(t.deadline - self._monotonic for _, _, t in self._timers if not t.cancelled)

    def _move(self, seconds: float) -> None:
        self._monotonic += seconds
        self._wall += seconds
