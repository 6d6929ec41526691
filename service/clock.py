"""Time as a collaborator.

Code that needs "now" for its own decisions (caches, rate windows, wait deadlines, token margins)
asks a ``Clock`` it was given, so a test can move time instead of sleeping through it. The
database clock stays the authority for anything another replica must agree on (flow expiry,
refresh claims): those comparisons are written in SQL against ``now()``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


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

    async def sleep(self, seconds: float) -> None: ...


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
