"""Retention: what has outlived its window is cleared or deleted, in small batches, on every replica.

Each step is one statement that picks up to ``batch`` rows with ``FOR UPDATE SKIP LOCKED`` and
clears or deletes them, in its own transaction: replicas running the same step at once take
different rows, and no transaction holds more than one batch of locks. A pass stops when every step
has drained or its time budget is spent, so a year of backlog after retention is first switched on
is worked off over many ticks instead of in one long pass that would compete with requests.

What is never touched, whatever the settings:

- a pending flow (every flow step requires a terminal status, rechecked under the row lock);
- a webhook event not yet delivered: only delivered outbox rows are deleted, and a flow that still
  has an undelivered (or abandoned) outbox row keeps its row, since deleting it would cascade;
- consent receipts (their own table, signed and self-contained, no foreign key to the flow);
- payment records: a flow with a ``payments`` row keeps its row (the payment and its flow's
  subject, client and outcome are the audit trail of money taken), only its ``result`` is cleared;
  ``payment_events`` are never deleted here.

Flow events go with their flow (``ON DELETE CASCADE``). Windows are compared with the database
clock, so a replica with a skewed clock never deletes early.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.db.unit import unit_of_work
from service.flows.pacing import Rest, rest_after
from service.settings import Settings

logger = logging.getLogger("elicitd.retention")

BATCH_SIZE = 1000
# Wall time one pass may spend per replica; the rest waits for the next chore tick.
PASS_BUDGET_SECONDS = 2.0
# Within a pass, after each full batch the step rests as long as the batch took: retention works
# at most half of the pass's time. Deleting competes with live requests for PostgreSQL's CPU and
# has no deadline; measured over a million-flow backlog (bench/scale.py, docs/scaling.md).
RETENTION_SHARE = 1 / 2

_CLEAR_RESULTS = text(
    "UPDATE flows f SET result = NULL FROM ("
    " SELECT id FROM flows WHERE result IS NOT NULL AND status <> 'pending'"
    " AND completed_at < now() - make_interval(secs => :keep)"
    " ORDER BY completed_at LIMIT :batch FOR UPDATE SKIP LOCKED) old "
    "WHERE f.id = old.id"
)
_DELETE_FLOWS = text(
    "DELETE FROM flows f USING ("
    " SELECT c.id FROM flows c WHERE c.created_at < now() - make_interval(secs => :keep)"
    " AND c.status <> 'pending' AND c.completed_at < now() - make_interval(secs => :keep)"
    " AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.flow_id = c.id)"
    " AND NOT EXISTS (SELECT 1 FROM webhook_outbox w WHERE w.flow_id = c.id AND w.delivered_at IS NULL)"
    " ORDER BY c.created_at LIMIT :batch FOR UPDATE OF c SKIP LOCKED) old "
    "WHERE f.id = old.id"
)
_DELETE_DELIVERED = text(
    "DELETE FROM webhook_outbox w USING ("
    " SELECT id FROM webhook_outbox WHERE delivered_at IS NOT NULL"
    " AND delivered_at < now() - make_interval(secs => :keep)"
    " ORDER BY delivered_at LIMIT :batch FOR UPDATE SKIP LOCKED) old "
    "WHERE w.id = old.id"
)
# Webhook attempts (migration 0018) are kept as long as delivered events: oldest ids first, which
# the primary key serves (ids grow with time).
_DELETE_ATTEMPTS = text(
    "DELETE FROM webhook_attempts a USING ("
    " SELECT id FROM webhook_attempts WHERE at < now() - make_interval(secs => :keep)"
    " ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED) old "
    "WHERE a.id = old.id"
)
# Audit rows are links of one hash chain (migration 0020): only its oldest end may go, or the chain
# would have a hole no check could tell from a deletion. A batch takes the first rows in chain order
# and deletes the leading run of them that is old enough (a row is never deleted before an older
# link, even one written a moment later by a transaction that began earlier), and in the same
# statement moves the chain's tail anchor to the last row deleted, so the remaining chain still
# starts where ``elicitd admin audit verify`` expects it.
_DELETE_AUDIT = text(
    "WITH oldest AS (SELECT id, seq, row_hash, at FROM admin_audit_log ORDER BY seq LIMIT :batch FOR UPDATE),"
    " old AS (SELECT id, seq, row_hash FROM oldest WHERE seq < coalesce((SELECT min(seq) FROM oldest"
    " WHERE at >= now() - make_interval(secs => :keep)), 9223372036854775807)),"
    " last AS (SELECT seq, row_hash FROM old ORDER BY seq DESC LIMIT 1),"
    " anchored AS (UPDATE admin_audit_chain c SET tail_seq = last.seq, tail_hash = last.row_hash"
    " FROM last WHERE c.tail_seq < last.seq) "
    "DELETE FROM admin_audit_log a USING old WHERE a.id = old.id"
)


@dataclass(frozen=True, slots=True)
class RetentionStep:
    name: str
    statement: TextClause
    keep_seconds: float


def steps(settings: Settings) -> list[RetentionStep]:
    """The steps the settings switch on, in the order a pass runs them."""
    wanted = (
        ("flow_results", _CLEAR_RESULTS, settings.result_retention_seconds),
        ("flows", _DELETE_FLOWS, settings.flow_retention_seconds),
        ("webhook_outbox", _DELETE_DELIVERED, settings.outbox_retention_seconds),
        ("webhook_attempts", _DELETE_ATTEMPTS, settings.outbox_retention_seconds),
        ("admin_audit_log", _DELETE_AUDIT, settings.audit_retention_seconds),
    )
    return [RetentionStep(name, statement, keep) for name, statement, keep in wanted if keep is not None]


async def run_step(session: AsyncSession, step: RetentionStep, batch: int = BATCH_SIZE) -> int:
    """One batch of one step; the caller's unit of work commits it."""
    result = await session.execute(step.statement, {"keep": step.keep_seconds, "batch": batch})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def run_retention(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    *,
    batch: int = BATCH_SIZE,
    budget_seconds: float = PASS_BUDGET_SECONDS,
    clock: Clock | None = None,
    rest: Rest = asyncio.sleep,
) -> dict[str, int]:
    """One pass: each step in batches until it drains or the pass's budget is spent.

    Returns the rows each step cleared or deleted. A failing step is logged and skipped, so one
    table's trouble never stops the others' retention or the sweeper. Between full batches a step
    rests (``service.flows.pacing``), unless its share of the budget is already spent."""
    clock = clock or SystemClock()
    done: dict[str, int] = {}
    chosen = steps(settings)
    share_seconds = budget_seconds / len(chosen)
    for step in chosen:
        # Each step gets its share, so a deep backlog in one table never starves the others.
        started = clock.monotonic()
        done[step.name] = 0
        while clock.monotonic() - started < share_seconds:
            batch_started = time.perf_counter()
            try:
                async with unit_of_work(sessions) as session:
                    count = await run_step(session, step, batch)
            except Exception as exc:  # upkeep must never stop the sweeper
                logger.warning("retention step failed", extra={"step": step.name, "error_type": type(exc).__name__})
                break
            done[step.name] += count
            if count < batch or clock.monotonic() - started >= share_seconds:
                break
            await rest(rest_after(time.perf_counter() - batch_started, RETENTION_SHARE))
    if any(done.values()):
        logger.info("retention pass", extra={"rows": done})
    return done
