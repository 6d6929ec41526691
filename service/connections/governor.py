"""How many proactive refresh calls a replica may have in flight, from how late its event loop runs:
the API's requests share that loop, so a refresh wave gives way to them (docs/connections.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Governor:
    """How many refresh calls may be in flight, from how late the event loop runs.

    While a pass works, ``watch`` sleeps ``period`` again and again and notes how late each wake-up
    came: the time the loop spent on everything else that was ready, the API's requests first
    among them. A tick later than ``lag_limit`` halves the calls allowed in flight, a tick within
    half of it adds one back (up to ``most``); never fewer than one. The lag is the loop's real
    time, not the injected clock's: it is what the API's requests wait. ``lag_limit`` None: always
    ``most``.
    """

    def __init__(self, most: int, lag_limit: float | None, period: float = 0.02) -> None:
        self.most = most
        self.lag_limit = lag_limit
        self.period = period
        self.allowed = most
        self.in_flight = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.allowed)
            self.in_flight += 1
        try:
            yield
        finally:
            async with self._changed:
                self.in_flight -= 1
                self._changed.notify_all()

    async def noted(self, lag: float) -> None:
        """One tick's lateness, in seconds."""
        if self.lag_limit is None:
            return
        if lag > self.lag_limit:
            allowed = max(1, self.allowed // 2)
        elif lag < self.lag_limit / 2:
            allowed = min(self.most, self.allowed + 1)
        else:
            return
        if allowed != self.allowed:
            async with self._changed:
                self.allowed = allowed
                self._changed.notify_all()

    async def watch(self) -> None:
        if self.lag_limit is None:
            return
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.period)
            await self.noted(loop.time() - start - self.period)
