"""Background upkeep every replica runs: expire overdue flows, then the other domains' chores.

Every replica runs it and none leads: the expiry statement lets one batch run at a time in the
whole fleet (a replica that finds another's batch running expires nothing and tries again at its
next tick), and ``SKIP LOCKED`` steps over flows a request is finishing at that moment.
Chores (dropping dead login attempts, OAuth states, browser sessions) and retention
(``service.flows.retention``) run less often than expiry: they only reclaim space, while expiry
decides outcomes.

The pauses run on the flow service's clock; *what* is overdue is decided by the database clock in
the sweep's own statement, so a replica with a skewed clock sweeps at odd moments but never early.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from service.db.unit import unit_of_work
from service.flows.pacing import Rest, rest_after
from service.flows.retention import run_retention
from service.flows.service import FlowService

logger = logging.getLogger("elicitd.sweeper")

Chore = Callable[[AsyncSession], Awaitable[int]]
CHORE_INTERVAL_SECONDS = 60.0
# A drain takes at most this share of the time it runs: after each full batch it rests twice as
# long as the batch took (share 1/3). Batches run one at a time in the fleet (the gate in
# ``repository.EXPIRE_DUE``), so a burst of expiries (100,000 due in the same minute) is swept at a
# third of the pace one database connection allows, and the requests served beside it keep their
# latency. Measured with bench/scale.py ``--parts sweep``, one batch at a time, two runs each:
# share 2/3 11.7-12.7 s, status p99 2.05-2.08x idle; 1/2 15.6-16.3 s, 1.65-1.72x; 1/3 24.1-24.2 s,
# 1.43-1.66x (target: within 60 s, at most 2x).
SWEEP_SHARE = 1 / 3


async def drain(flows: FlowService, rest: Rest = asyncio.sleep) -> int:
    """Expire every overdue flow, a batch at a time, resting between full batches
    (``service.flows.pacing``); returns how many."""
    swept = 0
    while True:
        started = time.perf_counter()
        moved = await flows.sweep_once()
        swept += moved
        if moved < flows.settings.sweep_batch_size:
            return swept
        await rest(rest_after(time.perf_counter() - started, SWEEP_SHARE))


async def run_chores(flows: FlowService, chores: Sequence[Chore]) -> int:
    """Each chore in its own transaction, so one failing does not undo the others."""
    done = 0
    for chore in chores:
        try:
            async with unit_of_work(flows.sessions) as session:
                done += await chore(session)
        except Exception as exc:  # upkeep must never stop the sweeper
            logger.warning("chore failed", extra={"error_type": type(exc).__name__})
    return done


async def run_sweeper(flows: FlowService, interval: float, chores: Sequence[Chore] = ()) -> None:
    clock = flows.clock
    last_chores: float | None = None
    while True:
        try:
            await drain(flows)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep sweeping after a database hiccup
            logger.warning("sweep failed", extra={"error_type": type(exc).__name__})
        if chores and (last_chores is None or clock.monotonic() - last_chores >= CHORE_INTERVAL_SECONDS):
            last_chores = clock.monotonic()
            await run_chores(flows, chores)
            await run_retention(flows.sessions, flows.settings, clock=clock)
        await clock.sleep(interval)
