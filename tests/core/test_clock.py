"""The clock seam: services take time from a ``Clock``; ``ManualClock`` moves only when told.

The guard at the end keeps it that way: a module that reads the process clock directly decides
something a test can then only sleep through.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest

from service.clock import SystemClock
from service.signals.bus import WaiterHub
from tests.support.clock import ManualClock
from tests.support.waiting import until

SERVICE = Path(__file__).resolve().parents[2] / "service"


async def test_advance_releases_sleepers_in_deadline_order_and_no_earlier() -> None:
    clock = ManualClock()
    start, wall = clock.monotonic(), clock.time()
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("b", 5), ("a", 1), ("c", 10))]
    await until(lambda: len(clock.deadlines()) == 3, what="three sleepers armed")
    assert clock.deadlines() == [1, 5, 10]

    clock.advance(4.9)
    await until(lambda: woke == ["a"], what="the 1 s sleeper released")
    assert [t.done() for t in tasks] == [False, True, False]
    assert clock.deadlines() == pytest.approx([0.1, 5.1])

    clock.advance(60)
    await asyncio.gather(*tasks)
    assert woke == ["a", "b", "c"]
    assert clock.monotonic() - start == pytest.approx(64.9)
    assert clock.time() - wall == pytest.approx(64.9)
    assert clock.now().timestamp() == pytest.approx(clock.time(), abs=1e-6)


async def test_a_cancelled_sleep_leaves_no_timer_and_zero_is_one_loop_turn() -> None:
    clock = ManualClock()
    task = asyncio.create_task(clock.sleep(30))
    await until(lambda: clock.deadlines() == [30], what="the sleeper armed")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert clock.deadlines() == []
    await asyncio.wait_for(clock.sleep(0), 1)
    await asyncio.wait_for(clock.sleep(-1), 1)


async def test_a_parked_wait_times_out_when_its_clock_says_so() -> None:
    clock = ManualClock()
    hub = WaiterHub(redis_url=None, channel="c", poll_interval=1, safety_poll_interval=30, finished=_none, clock=clock)
    flow_id = uuid.uuid4()
    with hub.register(flow_id) as waiter:
        assert hub.waiters_on(flow_id) == 1
        waiting = asyncio.create_task(waiter.wait(30))
        await until(lambda: len(clock.deadlines()) == 1, what="the wait's timeout armed")
        # The hub rounds a timeout up to its 50 ms slot, never down.
        assert 30 <= clock.deadlines()[0] <= 30.05
        clock.advance(29.99)
        assert not waiting.done()
        clock.advance(0.07)
        assert await asyncio.wait_for(waiting, 1) is False

        woken = asyncio.create_task(waiter.wait(30))
        await until(lambda: len(clock.deadlines()) == 1, what="the second wait armed")
        hub.wake(flow_id)
        assert await asyncio.wait_for(woken, 1) is True
    assert hub.waiters_on(flow_id) == 0


async def test_system_clock_is_the_process_clock() -> None:
    clock = SystemClock()
    fired = asyncio.Event()
    clock.call_later(0, fired.set)
    await asyncio.wait_for(fired.wait(), 1)
    assert abs(clock.time() - clock.now().timestamp()) < 1


async def _none(_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return []


# Reading the process clock directly is allowed only where the time is not a decision of ours.
_DIRECT = re.compile(r"\btime\.(time|monotonic|time_ns)\(\)|\bdatetime\.now\(|\basyncio\.sleep\((?!0\))|\bloop\.time\(")
_ALLOWED = {
    "clock.py": "the real clock itself",
    "db/base.py": "uuid7 ids carry a timestamp for ordering, not for any decision",
    "embedded.py": "waits for a child process (Redis, PostgreSQL) to start listening",
    "payments/stripe_provider.py": "the Stripe SDK checks a signature's age with the real clock; ours agrees",
    "observability/stalls.py": "measures how late the real event loop runs: real time is the quantity",
    "connections/governor.py": "measures how late the real event loop runs, as the stall monitor does",
    "devtools/": "the development stand-ins for an issuer and a provider play outside systems",
    "db/migrate.py": "a migrator polls the advisory lock while another process migrates: a wait, not a decision",
    "logs.py": "a log line's timestamp is when it was written, as the logging module stamps its records",
    "serve_command.py": "the supervisor times its own child processes (a restart's pause), outside any event loop",
    "signals/direct.py": "a publish's reply deadline and the heartbeat bound another process (Redis), like socket timeouts",
}


def test_no_service_module_reads_the_process_clock_directly() -> None:
    names = sorted(path.relative_to(SERVICE).as_posix() for path in SERVICE.rglob("*.py"))
    direct = [name for name in names if _DIRECT.search((SERVICE / name).read_text(encoding="utf-8"))]
    assert [name for name in direct if not name.startswith(tuple(_ALLOWED))] == []
