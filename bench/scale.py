"""The scale phase (``make bench PHASES=scale``): elicitd's data at production size.

Run on its own (``python bench/scale.py``) or from ``bench/run.py`` with ``--phases scale``; it is
not part of the default run, because loading a million flows takes minutes.

Scale part (``scale_phase``, what ``--phases scale`` runs): 10,000 flows (9,000 terminal, 1,000
pending) are loaded with ``COPY`` across 200 server clients and 50,000 subjects, and status,
resolve and create are measured at 32 connections; then the table is brought to 1,000,000 flows
(900,000 terminal created over 100 days, 100,000 pending) and the same three are measured again,
giving ``scale_*_ratio`` (1M ÷ 10k throughput), both p99s, and at each size
``scale_*_floor_ratio_10k``/``_1m``: each target over the raw-asyncpg floor (``bench/floor_factory.py``,
same database) measured just before and after it. Then a second replica is started and every
pending flow (100,000) comes due at the same instant: ``sweep_100k_seconds`` is how long after that
instant the last one was expired (``sweep_lag_p99_seconds``: expiry to sweep), and status p99 over
the whole sweep is compared with status p99 over the 30 seconds before (``sweep_status_p99_ratio``).
Last, retention runs over the backlog (results older than 7 days, flows older than 90), with
status p99 over the whole pass against the 30 seconds before, and table and index sizes before and
after. ``--parts sweep`` runs the sweep alone on 110,000 flows.
The measuring servers run with retention off, so only the measured pass deletes.

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
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import httpx

from bench.harness import (
    DATA,
    Backends,
    Generator,
    Server,
    Target,
    backends,
    floor_targets,
    hot_targets,
    percentile,
    server_env,
)
from service.db.unit import unit_of_work
from service.flows.retention import BATCH_SIZE, steps
from service.settings import KeyRing, Settings, normalize_database_url

EVENTS_PER_FLOW = 5
SUBJECT = {"iss": "https://id.bench.example", "sub": "bench-user"}
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


# ---- the scale phase: one million flows -----------------------------------------------------------
SMALL, LARGE, PENDING = 10_000, 1_000_000, 100_000
_STILL_PENDING = "SELECT count(*) AS n FROM flows WHERE status = 'pending' AND subject_iss = 'https://id.scale.example'"
# Asked every second while the sweep is measured: stops at the first pending row, where a count
# would visit every one of them (~100,000 heap reads per poll, competing with what is measured).
_ANY_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM flows WHERE status = 'pending' AND subject_iss = 'https://id.scale.example') AS n"
)
OFF = {"ELICITD_RESULT_RETENTION": "off", "ELICITD_FLOW_RETENTION": "off"}


async def _load(database_url: str, clients: list[uuid.UUID], total: int, pending: int) -> None:
    """``total`` flows: ``pending`` of them pending (expiring within a day), the rest terminal and
    created over the last 100 days (so a tenth is past the 90-day window), in COPY chunks."""
    conn = await asyncpg.connect(_plain(database_url))
    try:
        terminal, chunk = total - pending, 100_000
        for start in range(0, terminal, chunk):
            count = min(chunk, terminal - start)
            newest = 100 * (1 - (start + count) / terminal)
            await copy_flows(conn, clients, count=count, oldest_days=100 * (1 - start / terminal), newest_days=newest)
        for start in range(0, pending, chunk):
            await copy_flows(
                conn, clients, count=min(chunk, pending - start), oldest_days=0.01, newest_days=0, pending=True
            )
        await conn.execute("VACUUM ANALYZE flows")
    finally:
        await conn.close()


async def _more_clients(database_url: str, count: int) -> list[uuid.UUID]:
    conn = await asyncpg.connect(_plain(database_url))
    try:
        return await server_clients(conn, count)
    finally:
        await conn.close()


async def _sql(database_url: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(_plain(database_url))
    try:
        return await conn.fetchrow(sql, *args)
    finally:
        await conn.close()


def scale_phase(  # noqa: PLR0915 - one measurement after another, in order
    generator: Generator, found: Backends, keys: str, channel: str, api_key: str, client_id: uuid.UUID, seconds: float
) -> dict[str, Any]:
    """Status, resolve and create at 10,000 and at 1,000,000 flows in the same run; then 100,000
    expiries within one minute under two sweepers; then retention over the backlog."""
    from bench.harness import bracketed

    url = found.database_url
    clients = [client_id, *asyncio.run(_more_clients(url, 199))]
    asyncio.run(_load(url, clients, SMALL, SMALL // 10))
    env = server_env(found, keys, channel, **OFF)
    app = Server("elicitd-scale", "elicitd_factory:create", env).start()
    floor = Server("floor-scale", "floor_factory:create", dict(env, ELICITD_BENCH_CLIENT_ID=str(client_id)))
    second: Server | None = None
    out: dict[str, Any] = {}
    try:
        floor.start()
        auth = f"Bearer {api_key}"
        created = completed_flow(app, auth, "scale")
        flow_id = created["flow"]["id"]
        resolve_body = json.dumps(
            {
                "subject": SUBJECT | {"sub": "scale"},
                "request_state": created["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
            }
        )
        create_body = json.dumps(
            {
                "subject": {"iss": SUBJECT["iss"], "sub": "s-{n}"},
                "kind": "external",
                "url": "https://mcp.bench.example/step",
            }
        )
        targets = hot_targets(app.url, auth, flow_id, resolve_body, create_body)
        floor_read, _, insert, _ = floor_targets(floor.url, uuid.UUID(hex=flow_id.removeprefix("fl_")), create_body)
        # Each target over the raw-asyncpg floor measured just before and just after it (as in
        # bench/run.py): reads over the floor's read, create over the floor's insert.
        under = {"status": floor_read, "resolve": floor_read, "create": insert}

        def measure(label: str) -> dict[str, dict[str, float]]:
            figures = {}
            for target in targets:
                floor_target = under[target.name]
                generator.run(floor_target, 1.0)
                generator.run(target, 1.0)
                done = [(floor_target.name, generator.run(floor_target, seconds))]
                done.append((target.name, generator.run(target, seconds)))
                done.append((floor_target.name, generator.run(floor_target, seconds)))
                figures[target.name] = done[1][1] | {
                    "floor_ratio": bracketed(done, target.name, floor_target.name)["rps"]
                }
                say(
                    f"[scale] {label} {target.name}: {figures[target.name]['rps']:.0f} req/s, "
                    f"p99 {figures[target.name]['p99_ms']} ms, {figures[target.name]['floor_ratio']:.2f} of the floor"
                )
            return figures

        small = measure("10k flows")
        say(f"[scale] loading {LARGE - SMALL} more flows with COPY")
        started = time.perf_counter()
        asyncio.run(_load(url, clients, LARGE - SMALL, PENDING - SMALL // 10))
        out["scale_load_seconds"] = round(time.perf_counter() - started, 1)
        large = measure("1M flows")
        for name in ("status", "resolve", "create"):
            out[f"scale_{name}_ratio"] = round(large[name]["rps"] / small[name]["rps"], 3)
            out[f"scale_{name}_p99_ms_10k"] = small[name]["p99_ms"]
            out[f"scale_{name}_p99_ms_1m"] = large[name]["p99_ms"]
            out[f"scale_{name}_rps_10k"] = round(small[name]["rps"], 1)
            out[f"scale_{name}_rps_1m"] = round(large[name]["rps"], 1)
            out[f"scale_{name}_floor_ratio_10k"] = round(small[name]["floor_ratio"], 3)
            out[f"scale_{name}_floor_ratio_1m"] = round(large[name]["floor_ratio"], 3)
        out["scale_flows"] = int((asyncio.run(_sql(url, "SELECT count(*) AS n FROM flows")))["n"])

        # 100,000 expiries due at once, two replicas sweeping.
        second = Server("elicitd-scale-b", "elicitd_factory:create", env).start()
        out.update(sweep_burst(generator, url, targets[0], seconds))

        # Retention over the backlog, run as the replicas' sweepers run it, status measured over
        # the whole of it against the same measurement just before.
        sizes_before = asyncio.run(_sizes(url))
        idle = generator.run(targets[0], IDLE_SECONDS)
        box: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: box.update(asyncio.run(_retention_drain(url))))
        worker.start()
        during = generator.run_until(targets[0], lambda: not worker.is_alive())
        worker.join()
        out["retention_rows"] = box
        out["retention_idle_status_p99_ms"] = idle["p99_ms"]
        out["retention_status_p99_ms"] = during["p99_ms"]
        out["retention_status_p99_ratio"] = round(during["p99_ms"] / idle["p99_ms"], 2)
        out["retention_sizes_before"] = sizes_before
        out["retention_sizes_after"] = asyncio.run(_sizes(url))
    finally:
        app.stop()
        floor.stop()
        if second is not None:
            second.stop()
    return out


IDLE_SECONDS = 30.0  # the reference status measurement before the sweep and before retention


def completed_flow(server: Server, auth: str, sub: str) -> dict[str, Any]:
    """A new ``external`` flow completed through ``server``: what status and resolve read (its
    creation answer, with the flow and the MCP request state)."""
    from bench.run import create_external

    with httpx.Client(base_url=server.url, headers={"Authorization": auth}, timeout=30) as http:
        created = create_external(http, sub)
        done = http.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {"ok": True}})
        assert done.status_code == 200, done.text
    return created


def sweep_burst(generator: Generator, url: str, status: Target, seconds: float) -> dict[str, Any]:
    """Every pending flow of the scale subjects (100,000) made due at the same instant, with the
    replicas' sweepers running: how long until the last is expired (``sweep_100k_seconds``, from
    that instant) and each flow's wait from expiry to sweep. Status is measured over the whole
    sweep (one wrk run, stopped when no flow is left pending: the p99 of every request in it),
    against the same measurement over ``IDLE_SECONDS`` just before, same replicas, nothing due."""
    idle = generator.run(status, IDLE_SECONDS)
    pending = int(asyncio.run(_sql(url, _STILL_PENDING))["n"])
    row = asyncio.run(
        _sql(
            url,
            "UPDATE flows SET expires_at = now() WHERE status = 'pending' AND subject_iss = 'https://id.scale.example'"
            " AND kind = 'external' RETURNING now() AS t0",
        )
    )
    t0 = row["t0"]
    during = generator.run_until(status, lambda: not asyncio.run(_sql(url, _ANY_PENDING))["n"])
    swept = asyncio.run(
        _sql(
            url,
            "SELECT count(*) AS n, extract(epoch FROM max(completed_at) - $1) AS span,"
            " extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY completed_at - expires_at)) AS lag99"
            " FROM flows WHERE status = 'expired' AND completed_at >= $1",
            t0,
        )
    )
    out = {
        "sweep_100k_due": pending,
        "sweep_100k_expired": int(swept["n"]),
        "sweep_100k_seconds": round(float(swept["span"] or 0), 1),
        "sweep_lag_p99_seconds": round(float(swept["lag99"] or 0), 2),
        "sweep_idle_status_p99_ms": idle["p99_ms"],
        "sweep_idle_status_rps": round(idle["rps"], 1),
        "sweep_status_p99_ms": during["p99_ms"],
        "sweep_status_rps": round(during["rps"], 1),
        "sweep_status_p99_ratio": round(during["p99_ms"] / idle["p99_ms"], 2),
    }
    say(
        f"[scale] sweep: {out['sweep_100k_expired']} of {pending} expired, the last {out['sweep_100k_seconds']} s"
        f" after they came due; status p99 {out['sweep_status_p99_ms']} ms ({out['sweep_status_p99_ratio']}x"
        f" the {out['sweep_idle_status_p99_ms']} ms before)"
    )
    return out


async def _sizes(database_url: str) -> dict[str, dict[str, float]]:
    conn = await asyncpg.connect(_plain(database_url))
    try:
        await conn.execute("VACUUM ANALYZE flows")
        return await sizes(conn, ("flows", "flow_events", "webhook_outbox"))
    finally:
        await conn.close()


async def _retention_drain(database_url: str) -> dict[str, Any]:
    from sqlalchemy.ext.asyncio import create_async_engine

    from service.db.engine import make_sessionmaker
    from service.flows.retention import run_retention

    settings = Settings(
        database_url=normalize_database_url(database_url),
        redis_url=None,
        public_url="http://127.0.0.1:0",
        keys=KeyRing.parse(KeyRing.generate_entry("scale"), name="keys"),
    )
    engine = create_async_engine(settings.database_url, pool_size=2)
    totals: dict[str, int] = {}
    started = time.perf_counter()
    try:
        while True:
            done = await run_retention(make_sessionmaker(engine), settings, budget_seconds=8.0)
            for name, count in done.items():
                totals[name] = totals.get(name, 0) + count
            if not any(done.values()):
                break
    finally:
        await engine.dispose()
    return {**totals, "seconds": round(time.perf_counter() - started, 1)}


def run_scale(found: Backends, seconds: float, generator: str = "auto", connections: int = 32) -> dict[str, Any]:
    """The scale phase on its own database, with its own server client, keys and channel."""
    from bench.run import make_client

    api_key, client_id = asyncio.run(make_client(found.database_url))
    keys = KeyRing.generate_entry("scale1")
    channel = "elicitd:scale:" + uuid.uuid4().hex[:8]
    (DATA / "logs").mkdir(parents=True, exist_ok=True)
    return scale_phase(Generator.choose(generator, connections), found, keys, channel, api_key, client_id, seconds)


def run_sweep(found: Backends, seconds: float, generator: str = "auto", connections: int = 32) -> dict[str, Any]:
    """The burst sweep alone (``--parts sweep``): 10,000 terminal flows and 100,000 pending ones,
    two replicas, status measured on the first while every pending flow comes due at once."""
    from bench.run import make_client

    api_key, client_id = asyncio.run(make_client(found.database_url))
    url = found.database_url
    clients = [client_id, *asyncio.run(_more_clients(url, 199))]
    asyncio.run(_load(url, clients, SMALL + PENDING, PENDING))
    (DATA / "logs").mkdir(parents=True, exist_ok=True)
    env = server_env(found, KeyRing.generate_entry("sweep1"), "elicitd:sweep:" + uuid.uuid4().hex[:8], **OFF)
    servers = [Server("elicitd-sweep-a", "elicitd_factory:create", env).start()]
    try:
        servers.append(Server("elicitd-sweep-b", "elicitd_factory:create", env).start())
        auth = f"Bearer {api_key}"
        flow_id = completed_flow(servers[0], auth, "sweep")["flow"]["id"]
        status = Target("status", f"{servers[0].url}/v1/flows/{flow_id}", headers=(f"Authorization: {auth}",))
        gen = Generator.choose(generator, connections)
        gen.run(status, 2.0)  # warm-up
        return sweep_burst(gen, url, status, seconds)
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog-flows", type=int, default=200_000, help="old flows (5 flow events each) to delete")
    parser.add_argument(
        "--parts",
        default="retention,scale",
        help="retention (batches vs partitions), sweep (100k due at once), scale (1M flows)",
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per throughput measurement")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {}
    with backends() as found:
        say(f"[scale] {found.description}; database {found.database}")
        if "retention" in parts:
            results.update(asyncio.run(retention_part(found.database_url, args.backlog_flows)))
    if "sweep" in parts:
        with backends() as found:
            results.update(run_sweep(found, args.duration))
    if "scale" in parts:
        with backends() as found:
            results.update(run_scale(found, args.duration))
    (DATA / "scale.json").parent.mkdir(parents=True, exist_ok=True)
    (DATA / "scale.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
