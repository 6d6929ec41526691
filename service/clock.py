"""Time as a collaborator.

Code that needs "now" for its own decisions (caches, rate windows, wait deadlines, token margins)
asks a ``Clock`` it was given, so a test can move time instead of sleeping through it. The
database clock stays the authority for anything another replica must agree on (flow expiry,
refresh claims, key expiry, webhook retry times): those comparisons are written in SQL against
``now()``.

I/O timeouts (a socket read, a ping, an HTTP call) stay on the event loop's own clock: they bound
how long another process may take, which a test clock cannot speed up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for durations and deadlines."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (wall clock): for values compared with stored timestamps."""
        ...

    def now(self) -> datetime:
        """The wall clock as an aware UTC datetime."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` on this clock (at once, after one loop turn, when <= 0)."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` on the running loop after ``seconds`` on this clock.

        For timers that must not cost a task each (the waiter hub arms one per 50 ms slot)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def now(self) -> datetime:
        return datetime.now(tz=UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)
