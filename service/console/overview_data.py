"""The Overview's figures: one read of the database per figure, no change anywhere.

Flows are the admin API's ``stats`` (``service.admin.flows.stats``: counts by status and kind in
the window, completion rate as completed / created, the webhook backlog), with what the page adds:
per kind the 50th and 95th percentile of the time from creation to completion, the flows now
pending (whenever made), a series by status for the chart, connections by provider and status,
the connections whose last refresh or check needs a person again (by provider and reason), and
webhook deliveries abandoned in the window. Readiness is PostgreSQL answering and the Redis
subscription's own state, as ``/readyz`` judges them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.flows import stats
from service.admin.schemas import Stats

STATUSES = ("pending", "completed", "declined", "cancelled", "expired", "failed")
# A window and the width of one bar of the chart.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(hours=12)),
}
DEFAULT_WINDOW = "24h"


@dataclass(frozen=True, slots=True)
class KindFigures:
    kind: str
    created: int
    completed: int
    pending_now: int
    completion_rate: float | None
    p50_seconds: float | None
    p95_seconds: float | None


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class Overview:
    window: str
    since: datetime
    now: datetime
    step: timedelta
    stats: Stats
    kinds: list[KindFigures]
    pending_now: int
    series: list[Bucket]
    connections: dict[str, dict[str, int]]
    refresh_failures: list[tuple[str, str, int]]
    webhook_backlog: int
    abandoned: int
    readiness: dict[str, str] = field(default_factory=dict)

    @property
    def flows_in_window(self) -> int:
        return sum(count.count for count in self.stats.counts)

    @property
    def by_status(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for count in self.stats.counts:
            totals[count.status] += count.count
        return dict(totals)


_KINDS = text("""
    SELECT kind,
           count(*) AS created,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at))
               FILTER (WHERE status = 'completed') AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at))
               FILTER (WHERE status = 'completed') AS p95
    FROM flows WHERE created_at >= :since GROUP BY kind ORDER BY kind
""")
_PENDING = text("SELECT kind, count(*) FROM flows WHERE status = 'pending' GROUP BY kind")
_SERIES = text("""
    SELECT date_bin(make_interval(secs => :step), created_at, :since) AS bucket, status, count(*)
    FROM flows WHERE created_at >= :since GROUP BY 1, 2
""")
_CONNECTIONS = text("SELECT provider, status, count(*) FROM connections GROUP BY 1, 2 ORDER BY 1, 2")
_REFRESH_FAILURES = text("""
    SELECT provider, COALESCE(health_reason, 'unknown'), count(*) FROM authorizations
    WHERE health = 'needs_reauthorization' AND checked_at >= :since
    GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 20
""")
_ABANDONED = text("SELECT count(*) FROM webhook_outbox WHERE abandoned_at >= :since")


def window_of(raw: str | None) -> str:
    return raw if raw in WINDOWS else DEFAULT_WINDOW


async def overview(session: AsyncSession, window: str) -> Overview:
    """Every figure of the Overview for ``window`` (a key of ``WINDOWS``)."""
    length, step = WINDOWS[window]
    figures = await stats(session, length)
    since = figures.since
    now: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
    pending = {kind: int(n) for kind, n in (await session.execute(_PENDING)).all()}
    kinds = [
        KindFigures(
            kind=row.kind,
            created=int(row.created),
            completed=int(row.completed),
            pending_now=pending.get(row.kind, 0),
            completion_rate=(row.completed / row.created) if row.created else None,
            p50_seconds=None if row.p50 is None else float(row.p50),
            p95_seconds=None if row.p95 is None else float(row.p95),
        )
        for row in (await session.execute(_KINDS, {"since": since})).all()
    ]
    for kind in sorted(set(pending) - {k.kind for k in kinds}):
        kinds.append(KindFigures(kind, 0, 0, pending[kind], None, None, None))
    counted: dict[datetime, dict[str, int]] = defaultdict(dict)
    for bucket, status, n in (await session.execute(_SERIES, {"since": since, "step": step.total_seconds()})).all():
        counted[bucket][status] = int(n)
    series = []
    start = since
    while start < now:
        series.append(Bucket(start=start, counts=counted.get(start, {})))
        start += step
    connections: dict[str, dict[str, int]] = defaultdict(dict)
    for provider, status, n in (await session.execute(_CONNECTIONS)).all():
        connections[provider][status] = int(n)
    failures = [
        (provider, reason, int(n))
        for provider, reason, n in (await session.execute(_REFRESH_FAILURES, {"since": since})).all()
    ]
    abandoned = int((await session.execute(_ABANDONED, {"since": since})).scalar_one())
    return Overview(
        window=window,
        since=since,
        now=now,
        step=step,
        stats=figures,
        kinds=kinds,
        pending_now=sum(pending.values()),
        series=series,
        connections=dict(connections),
        refresh_failures=failures,
        webhook_backlog=figures.webhook_backlog,
        abandoned=abandoned,
    )


def duration(seconds: float | None) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``: a time to complete, short (numbers and SI-like units)."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def chart_bars(series: list[Bucket], *, width: int = 600, height: int = 160) -> dict[str, Any]:
    """The stacked bars of the flows chart, in SVG user units (the template draws them)."""
    top = max((bucket.total for bucket in series), default=0) or 1
    slot = width / max(len(series), 1)
    bars = []
    for index, bucket in enumerate(series):
        y = float(height)
        for status in STATUSES:
            n = bucket.counts.get(status, 0)
            if not n:
                continue
            h = n / top * height
            y -= h
            bars.append(
                {
                    "x": round(index * slot + 1, 2),
                    "y": round(y, 2),
                    "w": round(max(slot - 2, 1), 2),
                    "h": round(h, 2),
                    "status": status,
                    "n": n,
                    "start": bucket.start,
                }
            )
    return {"bars": bars, "top": top, "width": width, "height": height}
