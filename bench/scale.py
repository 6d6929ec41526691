"""The scale phase (``make bench PHASES=scale``): elicitd's data at production size.

Run on its own (``python bench/scale.py``) or from ``bench/run.py`` with ``--phases scale``; it is
not part of the default run, because loading a million flows takes minutes.

Retention part: a backlog of terminal flows past the 90-day window, each with five flow events
(one million ``flow_events`` rows), is loaded with ``COPY``; then

* the retention step ``service.flows.retention`` runs (batches of 1,000, ``SKIP LOCKED``) until it
  drains, while 8 connections read flows by primary key, as status does: batch time, rows/s and
  the readers' p99 before and during the deletion;
* the same million rows in a table partitioned by month on ``at`` are dropped a partition at a time
  (``DETACH PARTITION`` + ``DROP TABLE``), for comparison;
* table and index sizes before and after.

The last line printed is one JSON object. See bench/README.md and docs/scaling.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench.harness import DATA, backends, percentile
from service.db.unit import unit_of_work
from service.flows.retention import BATCH_SIZE, steps
from service.settings import KeyRing, Settings, normalize_database_url

EVENTS_PER_FLOW = 5
READERS = 8


def say(message: str) -> None:
    print(message, flush=True)


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def uuid7_at(when: datetime) -> uuid.UUID:
    """A time-ordered id for ``when``, laid out as ``service.db.base.uuid7`` lays out ids."""
    ms = int(when.timestamp() * 1000)
    rand = random.getrandbits(74)
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)


async def server_clients(conn: asyncpg.Connection, count: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    await conn.executemany(
        "INSERT INTO server_clients (id, name, display_name) VALUES ($1, $2, $3)",
        [(i, f"scale-{i.hex[:12]}", "Scale") for i in ids],
    )
    return ids


async def copy_flows(
    conn: asyncpg.Connection,
    clients: list[uuid.UUID],
    *,
    count: int,
    oldest_days: float,
    newest_days: float,
    pending: bool = False,
    events_per_flow: int = 0,
    subjects: int = 50_000,
) -> list[uuid.UUID]:
    """``count`` flows created evenly between ``oldest_days`` and ``newest_days`` ago, by COPY.

    Terminal ones completed a minute after creation with a small result; pending ones expire up to
    a day ahead. Returns the ids."""
    now = datetime.now(UTC)
    rows: list[tuple[Any, ...]] = []
    ids: list[uuid.UUID] = []
    span = oldest_days - newest_days
    for n in range(count):
        created = now - timedelta(days=oldest_days - span * n / max(count - 1, 1))
        flow_id = uuid7_at(created)
        ids.append(flow_id)
        subject = f"user-{random.randrange(subjects)}"
        status = "pending" if pending else random.choice(("completed", "completed", "completed", "declined", "expired"))
        completed = None if pending else created + timedelta(minutes=1)
        expires = now + timedelta(seconds=random.uniform(60, 86400)) if pending else created + timedelta(minutes=15)
        result = '{"ok": true, "note": "scale"}' if status == "completed" else None
        rows.append(
            (
                flow_id,
                clients[n % len(clients)],
                "external",
                "https://id.scale.example",
                subject,
                flow_id.hex,
                "Scale test",
                status,
                result,
                expires,
                created,
                completed,
                completed or created,
            )
        )
    await conn.copy_records_to_table(
        "flows",
        records=rows,
        columns=[
            "id",
            "server_client_id",
            "kind",
            "subject_iss",
            "subject_sub",
            "reuse_key",
            "message",
            "status",
            "result",
            "expires_at",
            "created_at",
            "completed_at",
            "updated_at",
        ],
    )
    if events_per_flow:
        await conn.copy_records_to_table(
            "flow_events",
            records=[
                (r[0], r[10] + timedelta(seconds=k), "transition", "api", "pending", r[7])
                for r in rows
                for k in range(events_per_flow)
            ],
            columns=["flow_id", "at", "type", "actor", "from_status", "to_status"],
        )
    return ids


async def sizes(conn: asyncpg.Connection, tables: tuple[str, ...]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for table in tables:
        row = await conn.fetchrow(
            "SELECT pg_table_size($1::regclass) AS t, pg_indexes_size($1::regclass) AS i,"
            " (SELECT count(*) FROM " + table + ") AS n",
            table,
        )
        assert row is not None
        out[table] = {
            "rows": row["n"],
            "table_mb": round(row["t"] / 2**20, 1),
            "indexes_mb": round(row["i"] / 2**20, 1),
        }
    return out


async def read_load(
    url: str, ids: list[uuid.UUID], stop: asyncio.Event, latencies: list[float], connections: int = READERS
) -> int:
    """Primary-key reads of ``flows`` (what a status request does) on ``connections`` connections."""

    async def one() -> int:
        conn = await asyncpg.connect(url)
        done = 0
        try:
            while not stop.is_set():
                started = time.perf_counter()
                await conn.fetchrow(
                    "SELECT id, status, result, expires_at FROM flows WHERE id = $1", random.choice(ids)
                )
                latencies.append((time.perf_counter() - started) * 1000)
                done += 1
        finally:
            await conn.close()
        return done

    return sum(await asyncio.gather(*(one() for _ in range(connections))))


async def p99_while(url: str, ids: list[uuid.UUID], work: Callable[[], Awaitable[Any]]) -> tuple[Any, float, float]:
    """Run ``work`` under the read load; returns its result, the readers' p99 (ms) and reads/s."""
    stop = asyncio.Event()
    latencies: list[float] = []
    readers = asyncio.create_task(read_load(url, ids, stop, latencies))
    await asyncio.sleep(0.5)
    latencies.clear()
    started = time.perf_counter()
    try:
        result = await work()
    finally:
        elapsed = time.perf_counter() - started
        stop.set()
        await readers
    return result, round(percentile(latencies, 99), 2), round(len(latencies) / max(elapsed, 1e-9))


async def retention_part(database_url: str, backlog_flows: int) -> dict[str, Any]:
    from sqlalchemy.ext.asyncio import create_async_engine

    from service.db.engine import make_sessionmaker
    from service.flows.retention import run_step

    url = _plain(database_url)
    conn = await asyncpg.connect(url)
    try:
        clients = await server_clients(conn, 50)
        say(f"[scale] loading {backlog_flows} old flows with {EVENTS_PER_FLOW} events each")
        await copy_flows(
            conn, clients, count=backlog_flows, oldest_days=180, newest_days=91, events_per_flow=EVENTS_PER_FLOW
        )
        young = await copy_flows(
            conn, clients, count=backlog_flows // 4, oldest_days=60, newest_days=1, events_per_flow=2
        )
        await conn.execute("VACUUM ANALYZE flows")
        await conn.execute("VACUUM ANALYZE flow_events")
        before = await sizes(conn, ("flows", "flow_events"))
    finally:
        await conn.close()

    settings = Settings(
        database_url=normalize_database_url(database_url),
        redis_url=None,
        public_url="http://127.0.0.1:0",
        keys=KeyRing.parse(KeyRing.generate_entry("scale"), name="keys"),
    )
    step = next(s for s in steps(settings) if s.name == "flows")
    engine = create_async_engine(normalize_database_url(database_url), pool_size=2)
    sessions = make_sessionmaker(engine)
    batch_ms: list[float] = []

    async def drain() -> int:
        total = 0
        while True:
            started = time.perf_counter()
            async with unit_of_work(sessions) as session:
                count = await run_step(session, step, BATCH_SIZE)
            batch_ms.append((time.perf_counter() - started) * 1000)
            total += count
            if count < BATCH_SIZE:
                return total

    _, idle_p99, idle_rps = await p99_while(url, young, lambda: asyncio.sleep(5))
    started = time.perf_counter()
    deleted, during_p99, during_rps = await p99_while(url, young, drain)
    seconds = time.perf_counter() - started
    await engine.dispose()

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM ANALYZE flows")
        await conn.execute("VACUUM ANALYZE flow_events")
        after = await sizes(conn, ("flows", "flow_events"))
        partitioned = await partition_part(conn, backlog_flows * EVENTS_PER_FLOW)
    finally:
        await conn.close()
    return {
        "retention_backlog_flows": backlog_flows,
        "retention_backlog_flow_events": backlog_flows * EVENTS_PER_FLOW,
        "retention_deleted_flows": deleted,
        "retention_seconds": round(seconds, 1),
        "retention_flows_per_second": round(deleted / seconds),
        "retention_flow_events_per_second": round(deleted * EVENTS_PER_FLOW / seconds),
        "retention_batch_p50_ms": round(percentile(batch_ms, 50), 1),
        "retention_batch_p99_ms": round(percentile(batch_ms, 99), 1),
        "retention_read_p99_idle_ms": idle_p99,
        "retention_read_p99_during_ms": during_p99,
        "retention_read_p99_ratio": round(during_p99 / idle_p99, 2) if idle_p99 else None,
        "retention_reads_per_second_idle": idle_rps,
        "retention_reads_per_second_during": during_rps,
        "retention_sizes_before": before,
        "retention_sizes_after": after,
        **partitioned,
    }


async def partition_part(conn: asyncpg.Connection, rows: int) -> dict[str, Any]:
    """The same volume of flow events in monthly partitions, dropped a partition at a time."""
    await conn.execute(
        "CREATE TABLE fe_part (id bigint GENERATED ALWAYS AS IDENTITY, flow_id uuid NOT NULL,"
        " at timestamptz NOT NULL, type varchar(48) NOT NULL, actor varchar(16) NOT NULL,"
        " from_status varchar(16), to_status varchar(16), detail jsonb NOT NULL DEFAULT '{}'::jsonb,"
        " PRIMARY KEY (id, at)) PARTITION BY RANGE (at)"
    )
    await conn.execute("CREATE INDEX ON fe_part (flow_id, id)")
    now = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    months = [(now - timedelta(days=31 * k)).replace(day=1) for k in range(7, -2, -1)]
    for lo, hi in itertools.pairwise(months):
        await conn.execute(
            f"CREATE TABLE fe_part_{lo:%Y%m} PARTITION OF fe_part"
            f" FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        )
    await conn.execute(
        "INSERT INTO fe_part (flow_id, at, type, actor, from_status, to_status)"
        " SELECT gen_random_uuid(), now() - interval '200 days' + (interval '200 days' / $1) * g,"
        " 'transition', 'api', 'pending', 'completed' FROM generate_series(1, $1) g",
        rows,
    )
    await conn.execute("VACUUM ANALYZE fe_part")
    horizon = datetime.now(UTC) - timedelta(days=90)
    dropped_rows, started = 0, time.perf_counter()
    drop_ms: list[float] = []
    for lo, hi in itertools.pairwise(months):
        if hi > horizon:
            break
        name = f"fe_part_{lo:%Y%m}"
        dropped_rows += await conn.fetchval(f"SELECT count(*) FROM {name}")
        t0 = time.perf_counter()
        await conn.execute(f"ALTER TABLE fe_part DETACH PARTITION {name}")
        await conn.execute(f"DROP TABLE {name}")
        drop_ms.append((time.perf_counter() - t0) * 1000)
    seconds = time.perf_counter() - started
    await conn.execute("DROP TABLE fe_part")
    return {
        "partition_dropped_rows": dropped_rows,
        "partition_drop_ms_each": [round(x, 1) for x in drop_ms],
        "partition_rows_per_second": round(dropped_rows / seconds) if seconds else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog-flows", type=int, default=200_000, help="old flows (5 flow events each) to delete")
    args = parser.parse_args()
    with backends() as found:
        say(f"[scale] {found.description}; database {found.database}")
        results = asyncio.run(retention_part(found.database_url, args.backlog_flows))
    (DATA / "scale.json").parent.mkdir(parents=True, exist_ok=True)
    (DATA / "scale.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
