"""The refresher's governor: fewer refresh calls in flight while the event loop runs late, so a
wave of refreshes yields to the API requests sharing the loop (the wave's own figures are
``make bench PHASES=refresh``). No database: the governor is the loop's own arithmetic."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from service.connections.governor import Governor
from service.connections.refresher import RefreshSettings
from service.errors import ConfigurationError
from service.settings import KeyRing, Settings


async def test_late_ticks_halve_prompt_ones_add_one_back_never_below_one() -> None:
    governor = Governor(8, lag_limit=0.010)
    seen = []
    for lag in (0.050, 0.050, 0.011, 0.030, 0.030, 0.001, 0.004, 0.007, 0.0):
        await governor.noted(lag)
        seen.append(governor.allowed)
    # 8 → 4 → 2 → 1 → 1 → 1, then +1 for each tick under half the limit; 7 ms (between half and
    # the limit) changes nothing.
    assert seen == [4, 2, 1, 1, 1, 2, 3, 3, 4]
    for _ in range(10):
        await governor.noted(0.0)
    assert governor.allowed == 8


async def test_no_limit_keeps_every_slot() -> None:
    governor = Governor(8, lag_limit=None)
    await governor.noted(5.0)
    assert governor.allowed == 8
    await asyncio.wait_for(governor.watch(), 1)  # returns at once: nothing to watch


async def test_a_slot_waits_while_the_allowed_calls_are_in_flight() -> None:
    governor = Governor(4, lag_limit=0.010)
    for _ in range(2):
        await governor.noted(1.0)  # 4 → 2 → 1
    order: list[str] = []

    async def call(name: str, hold: float) -> None:
        async with governor.slot():
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    first = asyncio.create_task(call("a", 0.05))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(call("b", 0.0))
    await asyncio.gather(first, second)
    assert order == ["a in", "a out", "b in", "b out"]
    assert governor.in_flight == 0


async def test_more_calls_are_let_in_when_the_allowance_grows() -> None:
    governor = Governor(2, lag_limit=0.010)
    await governor.noted(1.0)  # 2 → 1
    entered = asyncio.Event()

    async def holder() -> None:
        async with governor.slot():
            entered.set()
            await asyncio.sleep(0.2)

    async def second() -> float:
        async with governor.slot():
            return time.monotonic()

    held = asyncio.create_task(holder())
    await entered.wait()
    waiting = asyncio.create_task(second())
    await asyncio.sleep(0.02)
    assert not waiting.done()  # one allowed, one in flight
    started = time.monotonic()
    await governor.noted(0.0)  # 1 → 2: the waiting call goes in now, not when the first ends
    entered_at = await asyncio.wait_for(waiting, 1)
    assert entered_at - started < 0.1
    await held


async def test_the_watch_reads_the_real_loop_blocked_by_other_work() -> None:
    governor = Governor(8, lag_limit=0.010, period=0.01)
    stop = asyncio.Event()

    async def busy_api() -> None:
        # What a saturated API looks like to the loop: long stretches of work between awaits.
        while not stop.is_set():
            time.sleep(0.03)
            await asyncio.sleep(0)

    watch = asyncio.create_task(governor.watch())
    busy = asyncio.create_task(busy_api())
    await asyncio.sleep(0.3)
    low = governor.allowed
    stop.set()
    await busy
    await asyncio.sleep(0.4)  # a quiet loop: the allowance climbs back
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    assert low <= 2
    assert governor.allowed == 8


def settings_with(extra: dict[str, str]) -> Settings:
    keys = KeyRing.parse("k1:" + "A" * 43, name="ELICITD_KEYS")
    return Settings(database_url="postgresql://unused", redis_url=None, public_url="http://x", keys=keys, extra=extra)


def test_the_setting_reads_off_and_refuses_nonsense() -> None:
    assert RefreshSettings.from_settings(settings_with({})).loop_lag_ms == 10.0
    assert RefreshSettings.from_settings(settings_with({"REFRESH_LOOP_LAG_MS": "25"})).loop_lag_ms == 25.0
    assert RefreshSettings.from_settings(settings_with({"REFRESH_LOOP_LAG_MS": "off"})).loop_lag_ms is None
    with pytest.raises(ConfigurationError, match="ELICITD_REFRESH_LOOP_LAG_MS must be a number"):
        RefreshSettings.from_settings(settings_with({"REFRESH_LOOP_LAG_MS": "fast"}))
