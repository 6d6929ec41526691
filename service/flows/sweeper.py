"""Background upkeep every replica runs: expire overdue flows, then the other domains' chores.

``SKIP LOCKED`` keeps replicas apart, so running this on every replica is safe and needs no leader.
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
# A drain takes at most this share of the time it runs: after each full batch it rests half as
# long as the batch took (share 2/3). A burst of expiries (100,000 due in the same minute) is then
# swept at two thirds of the pace one database connection allows, instead of all of it, and the
# requests served beside it keep their latency (measured: bench/scale.py ``--parts sweep``).
SWEEP_SHARE = 2 / 3


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
