"""How long the event loop went without running anything else: the process's stall monitor.

One process serves thousands of parked long-polls from one event loop; any callback that holds
the loop (CPU work such as building an HTTP client or a TLS context, a full garbage collection, a
large JSON document) delays every one of them. The monitor is a task that sleeps a short interval
and measures how much later than asked it woke: the time the loop spent elsewhere.

Two views of the same lateness are exported in ``/metrics``, each as a histogram of every tick
since the process started and as the longest since the previous scrape (each scrape reads and
resets it, so a spike between two scrapes is never averaged away):

* ``elicitd_event_loop_stall_seconds`` / ``…_stall_max_seconds``: the lateness itself, what a
  parked request felt, whatever the cause — including a host so busy that it did not run the
  process at all;
* ``elicitd_event_loop_blocked_seconds`` / ``…_blocked_max_seconds``: the part of it the loop's
  own thread spent on the CPU (the thread's CPU clock, capped at the lateness). This is the
  process's own doing — what a code change can fix — and it stays meaningful on a shared host.

The instrument is the real clock on purpose (not the service's ``Clock``): it measures what the
loop actually did, not a decision a test would want to move.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client import CollectorRegistry, Gauge, Histogram

# 5 ms: fine enough to see one login's worth of CPU (~50 ms when an HTTP client was built per
# call), coarse enough that the monitor costs a few microseconds per 5 ms.
INTERVAL_SECONDS = 0.005
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _Lateness:
    """A histogram of every observation and the largest one since the last ``publish``."""

    def __init__(self, registry: CollectorRegistry, name: str, what: str) -> None:
        self.histogram = Histogram(f"{name}_seconds", what, buckets=_BUCKETS, registry=registry)
        self.gauge = Gauge(f"{name}_max_seconds", f"The longest since the previous scrape: {what}", registry=registry)
        self.longest = 0.0

    def observe(self, seconds: float) -> None:
        self.histogram.observe(seconds)
        self.longest = max(self.longest, seconds)

    def publish(self) -> float:
        longest, self.longest = self.longest, 0.0
        self.gauge.set(longest)
        return longest


class StallMonitor:
    """Measures the event loop's lateness; ``start`` it inside the loop it should watch."""

    def __init__(self, registry: CollectorRegistry, *, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.stall = _Lateness(
            registry,
            "elicitd_event_loop_stall",
            "how much later than asked the event loop ran a short timer (the time it spent elsewhere).",
        )
        self.blocked = _Lateness(
            registry,
            "elicitd_event_loop_blocked",
            "the part of an event-loop stall its own thread spent on the CPU (not waiting for the host).",
        )
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
        wall, cpu = time.perf_counter, time.thread_time
        while True:
            asked, spent = wall() + interval, cpu()
            await asyncio.sleep(interval)
            late = max(0.0, wall() - asked)
            self.observe(late, min(late, cpu() - spent))

    def observe(self, late: float, blocked: float) -> None:
        self.stall.observe(late)
        self.blocked.observe(blocked)

    def publish_max(self) -> tuple[float, float]:
        """Set both gauges to the longest since the last call and start a new period;
        returns ``(stall, blocked)``."""
        return self.stall.publish(), self.blocked.publish()
