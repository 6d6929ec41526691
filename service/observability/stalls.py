"""How long the event loop went without running anything else: the process's stall monitor.

One process serves thousands of parked long-polls from one event loop; any callback that holds
the loop (CPU work such as building an HTTP client, a large JSON document, a synchronous call)
delays every one of them. The monitor is a task that sleeps a short interval and measures how much
later than asked it woke: that lateness is the time the loop spent elsewhere without yielding.

Exported in ``/metrics``: ``elicitd_event_loop_stall_seconds``, a histogram of every tick's
lateness since the process started, and ``elicitd_event_loop_stall_max_seconds``, the longest
lateness since the previous scrape (each scrape reads and resets it, so a spike between two
scrapes is never averaged away).

The instrument is the real clock on purpose (not the service's ``Clock``): it measures what the
loop actually did, not a decision that a test would want to move.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client import CollectorRegistry, Gauge, Histogram

# 5 ms: fine enough to see a stall of one login's CPU (~50 ms when a client was built per call),
# coarse enough to cost the process about one wake-up of a few microseconds per 5 ms.
INTERVAL_SECONDS = 0.005
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class StallMonitor:
    """Measures the event loop's lateness; ``start`` it inside the loop it should watch."""

    def __init__(self, registry: CollectorRegistry, *, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.histogram = Histogram(
            "elicitd_event_loop_stall_seconds",
            "How much later than asked the event loop ran a short timer (time spent elsewhere without yielding).",
            buckets=_BUCKETS,
            registry=registry,
        )
        self.max_gauge = Gauge(
            "elicitd_event_loop_stall_max_seconds",
            "The longest event-loop stall since the previous scrape of /metrics.",
            registry=registry,
        )
        self._max = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="elicitd-stall-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        interval = self.interval
        clock = time.perf_counter
        while True:
            asked = clock() + interval
            await asyncio.sleep(interval)
            self.observe(max(0.0, clock() - asked))

    def observe(self, lateness: float) -> None:
        self.histogram.observe(lateness)
        self._max = max(self._max, lateness)

    def publish_max(self) -> float:
        """Set the gauge to the longest stall since the last call and start a new period."""
        longest, self._max = self._max, 0.0
        self.max_gauge.set(longest)
        return longest
