"""``make bench``: elicitd's hot path, wake-up latency and waiter memory, measured in one run.

1. Throughput of a completed flow: ``GET /v1/flows/{id}`` and ``POST /v1/flows/resolve`` against a
   baseline Litestar endpoint doing one primary-key read on the same ``flows`` table, all served
   the same way (uvicorn, same worker count, same engine settings, same load generator).
2. Wake latency: an ``external`` flow completed through instance A while a long-poll waits on
   instance B (two uvicorn processes sharing PostgreSQL and Redis).
3. Memory: one process holding 10,000 real long-polls, with one Redis subscription connection.

The last line printed is one JSON object with every figure. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psutil
import redis

from bench.harness import (
    DATA,
    SERVER_IMPL,
    Backends,
    Generator,
    Server,
    Target,
    backends,
    floor_targets,
    hot_targets,
    measure_rounds,
    percentile,
    raise_nofile,
    server_env,
    server_impl_args,
)
from bench.loadgen import build_request, read_answer
from service.settings import KeyRing, normalize_database_url
from service.signals.direct import DirectSubscription, connection_maker

SUBJECT = {"iss": "https://id.bench.example", "sub": "bench-user"}


def say(message: str) -> None:
    print(message, flush=True)


# ---- setup ---------------------------------------------------------------------------------------
async def make_client(database_url: str) -> tuple[str, uuid.UUID]:
    from sqlalchemy.ext.asyncio import create_async_engine

    from service.db.engine import make_sessionmaker
    from service.identity.clients import create_server_client

    engine = create_async_engine(normalize_database_url(database_url))
    try:
        async with make_sessionmaker(engine)() as session:
            # The measured paths are the API's own; subject proof (an issuer round trip) is not one.
            created = await create_server_client(session, "bench", display_name="Benchmark", subject_proof="none")
            await session.commit()
            return created.api_key, created.client.id
    finally:
        await engine.dispose()


def create_external(http: httpx.Client, sub: str) -> dict[str, Any]:
    body = {
        "subject": {"iss": SUBJECT["iss"], "sub": sub},
        "kind": "external",
        "url": "https://mcp.bench.example/step",
        "context": {"bench": sub},
    }
    response = http.post("/v1/flows", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


# ---- 1. throughput -------------------------------------------------------------------------------
TOKEN_PROVIDER = "benchhub"
TOKEN_SUB = "token-user"


async def make_connection(
    database_url: str, keys: str, client_id: uuid.UUID, *, iss: str = SUBJECT["iss"], sub: str = TOKEN_SUB
) -> str:
    """Setup only: a provider and one active connection whose one authorization holds an access
    token the vault sealed (bound to its subject, provider and account, as every token is), valid
    for an hour (so the token endpoint answers from the stored token, never refreshing), granted
    to the bench's server client with the grant's MAC, as a completed ``oauth_connect`` flow
    grants it."""
    import asyncpg

    from service.connections.sealing import ACCESS_TOKEN, binding
    from service.crypto.vault import Vault
    from service.db.base import CONNECTION_ID, uuid7
    from service.grants import integrity

    connection_id = uuid7()
    vault = Vault(KeyRing.parse(keys, name="ELICITD_KEYS"))
    # A connection's first authorization takes the connection's id, which owns its tokens.
    key_id, sealed = vault.encrypt(
        "gho_bench_access_token",
        owner=CONNECTION_ID.format(connection_id),
        purpose=ACCESS_TOKEN,
        bound=binding(iss, sub, TOKEN_PROVIDER, "42"),
    )
    mac_key_id, mac = integrity.seal(
        vault,
        connection_id=connection_id,
        authorization_id=connection_id,
        server_client_id=client_id,
        trust_group_id=None,
        scopes=["repo"],
    )
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO providers (name, display_name, client_id, token_endpoint) VALUES ($1, 'Bench', 'bench', "
            "'https://provider.bench.example/token') ON CONFLICT (name) DO NOTHING",
            TOKEN_PROVIDER,
        )
        await conn.execute(
            "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, account_login, scopes, "
            "expires_at, status) VALUES ($1, $2, $3, $4, '42', 'bench', '{repo}', now() + interval '1 hour', 'active')",
            connection_id,
            iss,
            sub,
            TOKEN_PROVIDER,
        )
        await conn.execute(
            "INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, scopes, "
            "access_token_enc, access_token_key_id, expires_at, status) "
            "SELECT id, id, subject_iss, subject_sub, provider, account_id, scopes, $2, $3, expires_at, 'active' "
            "FROM connections WHERE id = $1",
            connection_id,
            sealed,
            key_id,
        )
        await conn.execute(
            "INSERT INTO grants (id, connection_id, authorization_id, server_client_id, scopes, origin, mac, "
            "mac_key_id) VALUES ($1, $2, $2, $3, '{repo}', 'admin', $4, $5)",
            uuid7(),
            connection_id,
            client_id,
            mac,
            mac_key_id,
        )
    finally:
        await conn.close()
    return CONNECTION_ID.format(connection_id)


def stall_max_ms(url: str, api_key: str) -> float | None:
    """The longest event-loop stall since the previous scrape (``/metrics`` resets it on reading),
    or None when the server exports no stall gauge."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {api_key}"}, timeout=30).text
    for line in text.splitlines():
        if line.startswith("elicitd_event_loop_stall_max_seconds "):
            return round(float(line.split()[1]) * 1000, 2)
    return None


# One round: every elicitd target is measured between two measurements of its floor (the read
# floor, or the insert floor for create), and is compared with their mean. Other work on the
# machine comes and goes within seconds; a target compared with the floor measured just before
# and just after it sees the same neighbours, where one floor measurement per round would not.
# ``asgi`` (the same read with no framework) is bracketed by the floor too: status, resolve and
# token over it are their ratios over the floor divided by its own; ``asgi_insert`` (the insert with
# no framework) likewise by the insert floor, for create.
ROUND = (
    "floor", "status", "floor", "resolve", "floor", "token", "floor", "orm", "floor", "asgi", "floor",
    "insert", "create", "insert", "asgi_insert", "insert",
)  # fmt: skip
BRACKETED = (
    ("status", "floor"), ("resolve", "floor"), ("token", "floor"), ("orm", "floor"), ("asgi", "floor"),
    ("create", "insert"), ("asgi_insert", "insert"),
)  # fmt: skip


def check_floor(floor_url: str, raw_id: uuid.UUID, create_body: str) -> None:
    """The floor's two reads (through Litestar and bare) answer the same completed flow, and its two
    inserts make the same pending one."""
    assert httpx.get(f"{floor_url}/flows/{raw_id}").json()["status"] == "completed"
    assert httpx.get(f"{floor_url}/raw/flows/{raw_id}").json() == httpx.get(f"{floor_url}/flows/{raw_id}").json()
    for path in ("/flows", "/raw/flows"):
        made = httpx.post(
            f"{floor_url}{path}", content=create_body.replace("{n}", f"probe{path}-{secrets.token_hex(4)}")
        )
        assert made.status_code == 201, made.text
        assert made.json()["status"] == "pending", made.text


def throughput(
    args: argparse.Namespace, env: dict[str, str], api_key: str, client_id: uuid.UUID, connection_id: str
) -> dict[str, Any]:
    floor_env = dict(env, ELICITD_BENCH_CLIENT_ID=str(client_id))
    floor = Server("floor", "floor_factory:create", floor_env, workers=args.workers).start()
    base = Server("orm-baseline", "baseline_factory:create", env, workers=args.workers).start()
    app = Server("elicitd-throughput", "elicitd_factory:create", env, workers=args.workers).start()
    stall: float | None = None
    try:
        auth = f"Bearer {api_key}"
        with httpx.Client(base_url=app.url, headers={"Authorization": auth}, timeout=30) as http:
            created = create_external(http, "throughput")
            flow_id = created["flow"]["id"]
            done = http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ticket": "T-1", "ok": True}})
            assert done.status_code == 200, done.text
            assert done.json()["flow"]["status"] == "completed", done.text
            resolve_body = json.dumps(
                {
                    "subject": SUBJECT | {"sub": "throughput"},
                    "request_state": created["mcp"]["requestState"],
                    "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
                }
            )
            check = http.post("/v1/flows/resolve", content=resolve_body, headers={"Content-Type": "application/json"})
            assert check.status_code == 200, check.text
            assert check.json()["outcome"] == "completed", check.text
            assert http.get(f"/v1/flows/{flow_id}").json()["flow"]["status"] == "completed"
            token_path = f"/v1/connections/{TOKEN_PROVIDER}/token?" + urlencode(
                {"iss": SUBJECT["iss"], "sub": TOKEN_SUB}
            )
            token = http.get(token_path)
            assert token.status_code == 200, token.text
            assert token.json()["connection_id"] == connection_id, token.text
            assert token.json()["access_token"] == "gho_bench_access_token", token.text
        raw_id = uuid.UUID(hex=flow_id.removeprefix("fl_"))
        assert httpx.get(f"{base.url}/flows/{raw_id}").json()["status"] == "completed"
        create_body = json.dumps(
            {
                "subject": {"iss": SUBJECT["iss"], "sub": "c-{n}"},
                "kind": "external",
                "url": "https://mcp.bench.example/step",
                "context": {"bench": "create"},
            }
        )
        check_floor(floor.url, raw_id, create_body)
        status, resolve, create = hot_targets(app.url, auth, flow_id, resolve_body, create_body)
        floor_read, bare_read, insert, bare_insert = floor_targets(floor.url, raw_id, create_body)
        orm = Target("orm", f"{base.url}/flows/{raw_id}")
        token_target = Target("token", f"{app.url}{token_path}", headers=(f"Authorization: {auth}",))
        targets = [floor_read, bare_read, orm, status, resolve, token_target, insert, create, bare_insert]
        gen = Generator.choose(args.generator, args.connections)
        say(
            f"[throughput] generator={gen.kind} connections={gen.connections} workers={args.workers} "
            f"{args.rounds} rounds x {args.duration:g}s per measurement, each target between two of its floor"
        )
        for target in targets:
            gen.run(target, args.warmup)
        stall_max_ms(app.url, api_key)  # start a new stall period: what the measured rounds cause
        runs, ratios = measure_rounds(
            gen, targets, ROUND, BRACKETED, rounds=args.rounds, seconds=args.duration, label="throughput"
        )
        stall = stall_max_ms(app.url, api_key)
    finally:
        app.stop()
        base.stop()
        floor.stop()
    med = {name: statistics.median(r["rps"] for r in rs) for name, rs in runs.items()}
    p50 = {name: statistics.median(r["p50_ms"] for r in rs) for name, rs in runs.items()}
    p99 = {name: statistics.median(r["p99_ms"] for r in rs) for name, rs in runs.items()}

    def ratio(name: str, field: str = "rps", digits: int = 3) -> float:
        return round(statistics.median(r[field] for r in ratios[name]), digits)

    status_ratio = ratio("status")
    resolve_ratio = ratio("resolve")
    return {
        "generator": gen.kind,
        "connections": gen.connections,
        "workers": args.workers,
        "floor_rps": round(med["floor"], 1),
        "floor_insert_rps": round(med["insert"], 1),
        "orm_baseline_rps": round(med["orm"], 1),
        "status_rps": round(med["status"], 1),
        "resolve_rps": round(med["resolve"], 1),
        "token_rps": round(med["token"], 1),
        "create_rps": round(med["create"], 1),
        "status_floor_ratio": round(status_ratio, 3),
        "resolve_floor_ratio": round(resolve_ratio, 3),
        "create_floor_ratio": ratio("create"),
        "token_floor_ratio": ratio("token"),
        "orm_floor_ratio": ratio("orm"),
        # The same read with no framework (``floor_factory._BareRead``) as a thinner reference:
        # its own ratio over the floor, and status and resolve over it (not targets).
        "asgi_floor_rps": round(med["asgi"], 1),
        "asgi_floor_p99_ms": round(p99["asgi"], 2),
        "asgi_over_floor_ratio": ratio("asgi"),
        "status_asgi_floor_ratio": round(status_ratio / ratio("asgi"), 3),
        "resolve_asgi_floor_ratio": round(resolve_ratio / ratio("asgi"), 3),
        "token_asgi_floor_ratio": round(ratio("token") / ratio("asgi"), 3),
        # The insert with no framework, over the insert floor; create over it.
        "asgi_insert_rps": round(med["asgi_insert"], 1),
        "asgi_insert_p99_ms": round(p99["asgi_insert"], 2),
        "asgi_insert_over_insert_ratio": ratio("asgi_insert"),
        "create_asgi_floor_ratio": round(ratio("create") / ratio("asgi_insert"), 3),
        # The ORM baseline (one keyed read through an ORM session) as a second reference.
        "status_orm_ratio": round(med["status"] / med["orm"], 3),
        "resolve_orm_ratio": round(med["resolve"] / med["orm"], 3),
        "floor_p50_ms": round(p50["floor"], 2),
        "floor_p99_ms": round(p99["floor"], 2),
        "status_p50_ms": round(p50["status"], 2),
        "status_p99_ms": round(p99["status"], 2),
        "resolve_p50_ms": round(p50["resolve"], 2),
        "resolve_p99_ms": round(p99["resolve"], 2),
        "token_p50_ms": round(p50["token"], 2),
        "token_p99_ms": round(p99["token"], 2),
        "create_p99_ms": round(p99["create"], 2),
        "floor_insert_p99_ms": round(p99["insert"], 2),
        # p99 over the bracketing floor measurements' p99, then the median (the targets use these).
        "status_p99_floor_ratio": ratio("status", "p99_ms", 2),
        "resolve_p99_floor_ratio": ratio("resolve", "p99_ms", 2),
        "token_p99_floor_ratio": ratio("token", "p99_ms", 2),
        "loop_stall_max_ms": stall,
        "rounds_rps": {name: [round(r["rps"], 1) for r in rs] for name, rs in runs.items()},
        "rounds_p99_ms": {name: [round(r["p99_ms"], 2) for r in rs] for name, rs in runs.items()},
    }


def workers_phase(
    args: argparse.Namespace, env: dict[str, str], api_key: str, client_id: uuid.UUID, connection_id: str
) -> dict[str, Any]:
    """The throughput phase with one serving process and with two (``elicitd serve --workers 2``;
    the floor and the baseline as uvicorn's two workers), one after the other in the same run:
    each ratio to its floor, and elicitd's gain from one to two against the floor's own gain."""
    found: dict[int, dict[str, Any]] = {}
    for workers in (1, 2):
        say(f"[workers] throughput with {workers} serving process(es)")
        found[workers] = throughput(
            argparse.Namespace(**{**vars(args), "workers": workers, "rounds": args.workers_rounds}),
            env,
            api_key,
            client_id,
            connection_id,
        )
    figures: dict[str, Any] = {"workers_rounds": args.workers_rounds}
    for workers, result in found.items():
        for key in ("floor_rps", "asgi_floor_rps", "status_rps", "resolve_rps", "token_rps", "create_rps"):
            figures[f"workers{workers}_{key}"] = result[key]
        for name in ("status", "resolve", "token"):
            figures[f"workers{workers}_{name}_floor_ratio"] = result[f"{name}_floor_ratio"]
            figures[f"workers{workers}_{name}_asgi_floor_ratio"] = result[f"{name}_asgi_floor_ratio"]
    floor_gain = found[2]["floor_rps"] / found[1]["floor_rps"]
    figures["workers_floor_gain"] = round(floor_gain, 3)
    for name in ("status", "resolve", "token"):
        gain = found[2][f"{name}_rps"] / found[1][f"{name}_rps"]
        figures[f"workers_{name}_gain"] = round(gain, 3)
        figures[f"workers_{name}_gain_over_floor_gain"] = round(gain / floor_gain, 3)
    return figures


# ---- 2. wake latency -----------------------------------------------------------------------------
class MessageClock:
    """A third subscriber on the run's channel (in this process) noting when each wake-up message
    arrives: commit -> message is A's publish and Redis; message -> answer is B and the client.

    It reads as elicitd's own subscription does (``service.signals.direct``), so noting a message
    costs this process, which also reads both answers, ~45 µs rather than redis-py's ~130."""

    def __init__(self, subscription: DirectSubscription) -> None:
        self.subscription = subscription
        self.seen: dict[str, float] = {}
        self.task = asyncio.create_task(subscription.receive(self._note))

    @classmethod
    async def start(cls, redis_url: str, channel: str) -> MessageClock:
        # A heartbeat longer than the phase: this subscriber only listens.
        subscription = await DirectSubscription.open(
            connection_maker(redis_url), channel, heartbeat=3600, pong_timeout=60
        )
        return cls(subscription)

    def _note(self, data: object) -> None:
        # One message carries several space-separated ids (a flow's and its client's).
        at = time.perf_counter()
        assert isinstance(data, bytes)
        for token in data.decode().split():
            self.seen.setdefault(token, at)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.subscription.aclose()


class RawClient:
    """Requests on one keep-alive socket: each answer is stamped when its last byte has been read
    off the socket, before anything parses it (as wrk's clock stops in the throughput phase). The
    wake phase sends B's waiting requests and A's ``complete`` calls this way: through httpx the
    stamp also held the client's own parsing of the answer, in the loop that was parsing the
    other instance's answer at the same moment."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: httpx.URL, key: str) -> None:
        self.reader, self.writer = reader, writer
        self.url = url
        self.headers = [f"Authorization: Bearer {key}", "Content-Type: application/json"]

    @classmethod
    async def open(cls, base_url: str, key: str) -> RawClient:
        url = httpx.URL(base_url)
        reader, writer = await asyncio.open_connection(url.host, url.port)
        return cls(reader, writer, url, key)

    async def send(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, float]:
        """The answer's status and body, and the ``perf_counter`` at which its last byte was read."""
        assert self.url.port is not None
        self.writer.write(build_request(method, self.url.host, self.url.port, path, self.headers, body))
        status, answer = await read_answer(self.reader)
        return status, answer, time.perf_counter()

    async def wait_on(self, mode: str, created: dict[str, Any], sub: str) -> tuple[int, bytes, float]:
        """A status long-poll, or a resolve with ``accept``, on the flow ``created`` answered."""
        flow_id = created["flow"]["id"]
        if mode == "status":
            return await self.send("GET", f"/v1/flows/{flow_id}?wait_seconds=10")
        retry = {
            "subject": {"iss": SUBJECT["iss"], "sub": sub},
            "request_state": created["mcp"]["requestState"],
            "wait_seconds": 10,
            "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
        }
        return await self.send("POST", "/v1/flows/resolve", json.dumps(retry).encode())

    def close(self) -> None:
        self.writer.close()


@dataclasses.dataclass(frozen=True)
class Wake:
    """One wake-up's clock readings (``perf_counter``): the ``complete`` call sent, its answer read,
    A's commit mark, and B's answer read."""

    flow_id: str
    mode: str
    sent: float
    completed: float
    committed: float
    answered: float


async def one_wake(
    i: int, on_a: httpx.AsyncClient, on_b: httpx.AsyncClient, waiting: RawClient, completing: RawClient
) -> Wake:
    """A flow created on A, waited on through B, completed on A; checked, then timed. The waiter
    alternates the two ways an MCP server waits: a status long-poll and resolve(accept)."""
    mode = "status" if i % 2 == 0 else "resolve"
    sub = f"wake-{i}"
    created = (
        await on_a.post(
            "/v1/flows",
            json={
                "subject": {"iss": SUBJECT["iss"], "sub": sub},
                "kind": "external",
                "url": "https://mcp.bench.example/step",
            },
        )
    ).json()
    flow_id = created["flow"]["id"]
    waiter = asyncio.create_task(waiting.wait_on(mode, created, sub))
    # Complete only once B really holds the waiter (registered and past its first read).
    deadline = time.monotonic() + 5
    while (await on_b.get("/_bench/stats")).json()["waiters"] < 1:
        assert time.monotonic() < deadline, "waiter never registered"
        assert not waiter.done(), "waiter answered before it parked"
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.005)
    t0 = time.perf_counter()
    done_status, done, t_complete = await completing.send(
        "POST", f"/v1/flows/{flow_id}/complete", b'{"result": {"n": %d}}' % i
    )
    # B's answer is stamped when it was read, which may be before A's answer to
    # `complete` has reached this client.
    answer_status, answer, t1 = await waiter
    mark = (await on_a.get(f"/_bench/committed/{flow_id}")).json()["at"]
    assert mark is not None, "instance A announced no transition of the flow"
    assert done_status == 200, done
    answered = json.loads(answer)
    state = answered["flow"]["status"] if mode == "status" else answered["outcome"]
    assert answer_status == 200, answer
    assert state == "completed", answer
    return Wake(flow_id, mode, t0, t_complete, mark, t1)


async def wake_latency(args: argparse.Namespace, env: dict[str, str], api_key: str) -> dict[str, Any]:
    stats_env = dict(env, ELICITD_BENCH_STATS="1")
    a = Server("elicitd-A", "elicitd_factory:create", stats_env, workers=1).start()
    b = Server("elicitd-B", "elicitd_factory:create", stats_env, workers=1).start()
    headers = {"Authorization": f"Bearer {api_key}"}
    samples: dict[str, list[float]] = {"status": [], "resolve": []}
    complete_ms: list[float] = []
    commit_ms: list[float] = []
    published_ms: list[float] = []
    heard = await MessageClock.start(env["ELICITD_REDIS_URL"], env["ELICITD_REDIS_CHANNEL"])
    waiting = await RawClient.open(b.url, api_key)
    completing = await RawClient.open(a.url, api_key)
    try:
        async with (
            httpx.AsyncClient(base_url=a.url, headers=headers, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.url, headers=headers, timeout=30) as on_b,
        ):
            # The first wake-ups of a fresh pair of instances are their first of everything (the
            # pool's statements, the code paths, the caches); like the throughput phase's warm-up
            # they are run and not counted.
            for i in range(-args.wake_warmup, 0):
                await one_wake(i, on_a, on_b, waiting, completing)
            received_before = (await on_b.get("/_bench/stats")).json()["received"]
            for i in range(args.samples):
                woke = await one_wake(i, on_a, on_b, waiting, completing)
                commit_ms.append((woke.answered - woke.committed) * 1000)
                if (at := heard.seen.get(woke.flow_id.removeprefix("fl_"))) is not None:
                    published_ms.append((at - woke.committed) * 1000)
                samples[woke.mode].append((woke.answered - woke.sent) * 1000)
                complete_ms.append((woke.completed - woke.sent) * 1000)
            received = (await on_b.get("/_bench/stats")).json()["received"] - received_before
    finally:
        waiting.close()
        completing.close()
        await heard.stop()
        a.stop()
        b.stop()
    every = samples["status"] + samples["resolve"]
    return {
        "wake_samples": len(every),
        "wake_warmup": args.wake_warmup,
        "wake_p50_ms": round(percentile(every, 50), 2),
        "wake_p99_ms": round(percentile(every, 99), 2),
        "wake_max_ms": round(max(every), 2),
        "wake_status_p50_ms": round(percentile(samples["status"], 50), 2),
        "wake_status_p99_ms": round(percentile(samples["status"], 99), 2),
        "wake_resolve_p50_ms": round(percentile(samples["resolve"], 50), 2),
        "wake_resolve_p99_ms": round(percentile(samples["resolve"], 99), 2),
        "complete_call_p50_ms": round(percentile(complete_ms, 50), 2),
        "complete_call_p99_ms": round(percentile(complete_ms, 99), 2),
        # From A's commit (its announce, before the publish) to B's answer reaching the client.
        "wake_commit_p50_ms": round(percentile(commit_ms, 50), 2),
        "wake_commit_p99_ms": round(percentile(commit_ms, 99), 2),
        # commit -> the wake-up message reaching a third subscriber (A's publish and Redis).
        "wake_publish_p50_ms": round(percentile(published_ms, 50), 2) if published_ms else None,
        "wake_publish_p99_ms": round(percentile(published_ms, 99), 2) if published_ms else None,
        "wake_redis_messages_on_b": received,
    }


# ---- 3. 10,000 waiters ---------------------------------------------------------------------------
async def insert_pending(database_url: str, client_id: uuid.UUID, count: int) -> list[uuid.UUID]:
    """Setup only (not measured): ``count`` pending external flows in one statement."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, reuse_key, message, "
            "external_url, expires_at) SELECT gen_random_uuid(), $1, 'external', $2, 'waiter-' || g, 'bench', "
            "'Continue in your browser', 'https://mcp.bench.example/step', now() + interval '1 hour' "
            "FROM generate_series(1, $3) AS g RETURNING id",
            client_id,
            SUBJECT["iss"],
            count,
        )
    finally:
        await conn.close()
    return [r["id"] for r in rows]


def redis_connections(redis_url: str, pid: int, channel: str) -> dict[str, Any]:
    """Match the server process's TCP connections to Redis ``CLIENT LIST`` entries."""
    local = {f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.Process(pid).net_connections(kind="tcp") if c.raddr}
    r = redis.Redis.from_url(redis_url)
    try:
        mine = [c for c in r.client_list() if c["addr"] in local]
        numsub = dict(r.pubsub_numsub(channel))
    finally:
        r.close()
    return {
        "redis_connections_of_process": len(mine),
        "redis_subscriber_connections_of_process": sum(1 for c in mine if int(c.get("sub", 0)) > 0),
        "redis_pubsub_numsub": int(numsub.get(channel.encode(), 0)),
        "redis_client_commands": sorted(c.get("cmd", "") for c in mine),
    }


async def waiters(
    args: argparse.Namespace, env: dict[str, str], found: Backends, api_key: str, client_id: uuid.UUID, channel: str
) -> dict[str, Any]:
    ids = await insert_pending(found.database_url, client_id, args.waiters)
    paths = DATA / "waiter-paths.txt"
    paths.write_text("".join(f"/v1/flows/fl_{i.hex}?wait_seconds=300\n" for i in ids))
    w = Server(
        "elicitd-waiters",
        "elicitd_factory:create",
        dict(env, ELICITD_BENCH_STATS="1", ELICITD_MAX_WAIT_SECONDS="300"),
        workers=1,
    ).start()
    client: subprocess.Popen[str] | None = None
    try:
        async with httpx.AsyncClient(base_url=w.url, timeout=30) as http:
            idle = (await http.get("/_bench/stats")).json()
            proc = psutil.Process(idle["pid"])
            idle_rss = proc.memory_info().rss
            client = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is measured
                [
                    sys.executable,
                    str(Path(__file__).with_name("loadgen.py")),
                    "waiters",
                    "--port",
                    str(w.port),
                    "--paths-file",
                    str(paths),
                    "--api-key",
                    api_key,
                    "--batch",
                    str(args.waiter_batch),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert client.stdout is not None
            assert client.stdin is not None
            sent = json.loads(await asyncio.to_thread(client.stdout.readline))
            started = time.monotonic()
            while (stats := (await http.get("/_bench/stats")).json())["waiters"] < args.waiters:
                assert time.monotonic() - started < 120, f"only {stats['waiters']} waiters registered"
                await asyncio.sleep(0.25)
            await asyncio.sleep(1.0)  # let allocator and buffers settle before reading memory
            stats = (await http.get("/_bench/stats")).json()
            rss = proc.memory_info().rss
            established = sum(
                1
                for c in proc.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == w.port
            )
            conns = redis_connections(found.redis_url, idle["pid"], channel)
            client.stdin.write("stop\n")
            client.stdin.flush()
            done = json.loads(await asyncio.to_thread(client.stdout.readline))
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        w.stop()
    assert done["answered_early"] == 0, done
    return {
        "waiters_requested": args.waiters,
        "waiters_registered_in_hub": stats["waiters"],
        "waiters_http_connections": established,
        "waiters_answered_early": done["answered_early"],
        "waiters_open_seconds": round(sent["seconds"], 2),
        "waiters_batch": args.waiter_batch,
        "idle_rss_mb": round(idle_rss / 2**20, 1),
        "waiters_10k_rss_mb": round(rss / 2**20, 1),
        "waiters_rss_kb_per_waiter": round((rss - idle_rss) / 1024 / args.waiters, 2),
        **conns,
    }


# ---- targets -------------------------------------------------------------------------------------
TARGETS: dict[str, float] = {
    "status_floor_ratio_min": 0.7,
    "resolve_floor_ratio_min": 0.7,
    "p99_over_floor_p99_max": 3.0,
    "wake_commit_p99_ms_max": 3.0,
    "wake_p99_ms_max": 15.0,
    "waiters_10k_rss_mb_max": 220.0,
    "idle_rss_mb_max": 100.0,
    "waiters_rss_kb_per_waiter_max": 12.0,
    "create_floor_ratio_min": 0.5,
    "token_floor_ratio_min": 0.6,
    "refresh_wave_over_rest_p99_max": 1.5,
    "workers2_floor_ratio_min": 0.85,
    "workers_gain_over_floor_gain_min": 0.9,
}


def missed_targets(results: dict[str, Any], phases: set[str]) -> list[str]:
    """Every target the run did not meet (a phase not run counts as missed)."""
    t, r = TARGETS, results
    checks: dict[str, tuple[str, bool]] = {
        "status_floor_ratio": ("throughput", r.get("status_floor_ratio", 0) >= t["status_floor_ratio_min"]),
        "resolve_floor_ratio": ("throughput", r.get("resolve_floor_ratio", 0) >= t["resolve_floor_ratio_min"]),
        "create_floor_ratio": ("throughput", r.get("create_floor_ratio", 0) >= t["create_floor_ratio_min"]),
        "token_floor_ratio": ("throughput", r.get("token_floor_ratio", 0) >= t["token_floor_ratio_min"]),
        "status_p99_ms": ("throughput", r.get("status_p99_floor_ratio", 1e9) <= t["p99_over_floor_p99_max"]),
        "resolve_p99_ms": ("throughput", r.get("resolve_p99_floor_ratio", 1e9) <= t["p99_over_floor_p99_max"]),
        "token_p99_ms": ("throughput", r.get("token_p99_floor_ratio", 1e9) <= t["p99_over_floor_p99_max"]),
        "wake_commit_p99_ms": ("wake", r.get("wake_commit_p99_ms", 1e9) <= t["wake_commit_p99_ms_max"]),
        "wake_p99_ms": ("wake", r.get("wake_p99_ms", 1e9) <= t["wake_p99_ms_max"]),
        "waiters_10k_rss_mb": ("waiters", r.get("waiters_10k_rss_mb", 1e9) <= t["waiters_10k_rss_mb_max"]),
        "idle_rss_mb": ("waiters", r.get("idle_rss_mb", 1e9) <= t["idle_rss_mb_max"]),
        "waiters_rss_kb_per_waiter": (
            "waiters",
            r.get("waiters_rss_kb_per_waiter", 1e9) <= t["waiters_rss_kb_per_waiter_max"],
        ),
        "redis_subscriber_connections_of_process": (
            "waiters",
            r.get("redis_subscriber_connections_of_process") == 1,
        ),
        "refresh_wave_over_rest_p99": (
            "refresh",
            r.get("refresh_wave_over_rest_p99") is not None
            and r["refresh_wave_over_rest_p99"] <= t["refresh_wave_over_rest_p99_max"],
        ),
        # Every connection of the wave refreshed exactly once, never faster than the pace allows.
        "refresh_exactly_once": (
            "refresh",
            r.get("refresh_count") == r.get("refresh_connections") == r.get("refresh_rows_refreshed"),
        ),
        "refresh_max_in_any_second": (
            "refresh",
            r.get("refresh_max_in_any_second", 1e9) <= r.get("refresh_rate_configured", 0) + 1,
        ),
    }
    if "workers" in phases:
        # Two serving processes: each endpoint at least 0.85 of the floor served the same way, and
        # elicitd's gain from one process to two at least 0.9 of the floor's own.
        checks.update(
            {
                **{
                    f"workers2_{name}_floor_ratio": (
                        "workers",
                        r.get(f"workers2_{name}_floor_ratio", 0) >= t["workers2_floor_ratio_min"],
                    )
                    for name in ("status", "resolve", "token")
                },
                **{
                    f"workers_{name}_gain_over_floor_gain": (
                        "workers",
                        r.get(f"workers_{name}_gain_over_floor_gain", 0) >= t["workers_gain_over_floor_gain_min"],
                    )
                    for name in ("status", "resolve", "token")
                },
            }
        )
    if "proof" in phases:
        from bench.proof import proof_checks

        checks.update({name: ("proof", met) for name, met in proof_checks(results).items()})
    if "overload" in phases:
        from bench.overload import overload_checks

        checks.update({name: ("overload", met) for name, met in overload_checks(results).items()})
    return [name for name, (phase, met) in checks.items() if phase not in phases or not met]


# ---- 5. the refresh wave -------------------------------------------------------------------------
def refresh(
    args: argparse.Namespace, phases: set[str], found: Backends, keys: str, channel: str, api_key: str
) -> dict[str, Any]:
    """``bench/refresh_wave.py`` (when the run's phases name it)."""
    if "refresh" not in phases:
        return {}
    from bench.refresh_wave import refresh_phase, token_path

    gen = Generator.choose(args.generator, args.connections)
    path = token_path(TOKEN_PROVIDER, TOKEN_SUB)
    # The wave's pace, calls a second to its provider (``ELICITD_BENCH_REFRESH_RATE``, default 100).
    rate = float(os.environ.get("ELICITD_BENCH_REFRESH_RATE", "100"))
    # The API's offered load during the phase, a share of its capacity (``ELICITD_BENCH_REFRESH_LOAD``).
    load = float(os.environ.get("ELICITD_BENCH_REFRESH_LOAD", "0.5"))
    # Where the refresher runs: ``worker`` (``elicitd worker`` beside a serving-only server, the
    # default) or ``server`` (the server's own background task).
    worker = os.environ.get("ELICITD_BENCH_REFRESH_IN", "worker") == "worker"
    found_figures = refresh_phase(
        gen, found, keys, channel, api_key, path, duration=args.duration, rate=rate, load=load, worker=worker
    )
    say(
        f"[refresh] {found_figures['refresh_count']} refreshes in {found_figures['refresh_seconds']} s "
        f"({found_figures['refreshes_per_second']}/s, at most {found_figures['refresh_max_in_any_second']} in "
        f"any second at a pace of {found_figures['refresh_rate_configured']}/s); token p99 "
        f"{found_figures['refresh_rest_p99_ms']} ms at rest, {found_figures['refresh_wave_p99_ms']} ms in the wave "
        f"(offered {found_figures['refresh_api_offered_rps']} req/s of {found_figures['refresh_api_capacity_rps']})"
    )
    return found_figures


# ---- 4. subject proof ----------------------------------------------------------------------------
def proof(
    args: argparse.Namespace, phases: set[str], env: dict[str, str], found: Backends, keys: str, api_key: str
) -> dict[str, Any]:
    """``bench/proof.py`` (when the run's phases name it): the exempt client's endpoints against a
    client that must prove the subject."""
    if "proof" not in phases:
        return {}
    from bench.proof import TARGETS as PROOF_TARGETS
    from bench.proof import proof_checks, proof_phase

    token_path = f"/v1/connections/{TOKEN_PROVIDER}/token?" + urlencode({"iss": SUBJECT["iss"], "sub": TOKEN_SUB})
    subject = {"iss": SUBJECT["iss"], "sub": "proof-exempt"}
    figures = proof_phase(args, env, found.database_url, keys, api_key, subject, token_path, make_connection)
    say(
        "[proof] proven over exempt (ES256 / RS256 / introspection): "
        + ", ".join(
            f"{e} {figures[f'proof_{e}_es256_ratio']} / {figures[f'proof_{e}_rs256_ratio']} / "
            f"{figures[f'proof_{e}_opaque_ratio']}"
            for e in ("status", "resolve", "token", "create")
        )
        + f"; first proven call cold {figures['proof_cold_first_ms']} ms"
    )
    missed = [name for name, met in proof_checks(figures).items() if not met]
    return figures | {"proof_targets": PROOF_TARGETS, "proof_targets_missed": missed, "proof_targets_met": not missed}


# ---- 6. overload ---------------------------------------------------------------------------------
def overload(args: argparse.Namespace, phases: set[str], env: dict[str, str], api_key: str) -> dict[str, Any]:
    """``bench/overload.py`` (only when the run's phases name it: not in the default run)."""
    if "overload" not in phases:
        return {}
    from bench.overload import TARGETS as OVERLOAD_TARGETS
    from bench.overload import overload_checks, overload_phase

    found_figures = overload_phase(Generator.choose(args.generator, args.connections), env, api_key)
    say(
        f"[overload] capacity {found_figures['overload_capacity_rps']} req/s; at 2x: admitted p99 "
        f"{found_figures['overload_p99_over_half']}x its 0.5x p99, refusals within "
        f"{found_figures['overload_refused_max_ms']} ms, {found_figures['overload_unanswered']} unanswered, "
        f"recovered in {found_figures['overload_recovery_seconds']} s"
    )
    missed = [name for name, met in overload_checks(found_figures).items() if not met]
    return found_figures | {
        "overload_targets": OVERLOAD_TARGETS,
        "overload_targets_missed": missed,
        "overload_targets_met": not missed,
    }


# ---- main ----------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--connections", type=int, default=32, help="load-generator connections")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers for both throughput servers")
    parser.add_argument(
        "--duration", type=float, default=3.0, help="seconds per throughput measurement (whole seconds with wrk)"
    )
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds; the median counts")
    parser.add_argument("--proof-rounds", type=int, default=3, help="interleaved rounds of the proof phase")
    parser.add_argument("--workers-rounds", type=int, default=3, help="rounds per process count in the workers phase")
    parser.add_argument("--samples", type=int, default=1000, help="wake-latency samples")
    parser.add_argument("--wake-warmup", type=int, default=20, help="wake-ups run first and not counted")
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument(
        "--waiter-batch",
        type=int,
        default=100,
        help="long-polls opened at once; the next batch starts when these are parked",
    )
    parser.add_argument(
        "--server-impl",
        choices=["auto", "stdlib"],
        default="auto",
        help="auto: uvloop + httptools when installed (as elicitd serve); stdlib: asyncio + h11",
    )
    parser.add_argument(
        "--phases",
        default="throughput,wake,waiters,refresh",
        help="comma-separated subset to run (all four by default; scale on request)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    phases = set(args.phases.split(","))
    SERVER_IMPL["mode"] = args.server_impl

    # SIGTERM runs the cleanup (servers, embedded backends, the database) like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    nofile = raise_nofile()
    (DATA / "logs").mkdir(parents=True, exist_ok=True)
    keys = KeyRing.generate_entry("bench1")
    channel = "elicitd:bench:" + secrets.token_hex(4)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "nofile": nofile,
        # Other work on the machine moves every figure here; the load average says how much.
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    say(f"[bench] {machine}")
    with backends() as found:
        say(f"[bench] {found.description}; database {found.database}")
        api_key, client_id = asyncio.run(make_client(found.database_url))
        connection_id = asyncio.run(make_connection(found.database_url, keys, client_id))
        env = server_env(found, keys, channel)
        results: dict[str, Any] = {}
        if "throughput" in phases:
            results.update(throughput(args, env, api_key, client_id, connection_id))
            say(
                f"[throughput] floor {results['floor_rps']} req/s (p99 {results['floor_p99_ms']} ms): "
                f"status {results['status_floor_ratio']}, resolve {results['resolve_floor_ratio']}, "
                f"token {results['token_floor_ratio']}, create {results['create_floor_ratio']} of the floor"
            )
        if "workers" in phases:  # not in the default run: the throughput phase twice over
            results.update(workers_phase(args, env, api_key, client_id, connection_id))
            say(
                f"[workers] gain from one process to two: floor {results['workers_floor_gain']}, status "
                f"{results['workers_status_gain']}, resolve {results['workers_resolve_gain']}, token "
                f"{results['workers_token_gain']}"
            )
        if "wake" in phases:
            results.update(asyncio.run(wake_latency(args, env, api_key)))
            say(
                f"[wake] p50 {results['wake_p50_ms']} ms, p99 {results['wake_p99_ms']} ms over "
                f"{results['wake_samples']} samples"
            )
        if "waiters" in phases:
            results.update(asyncio.run(waiters(args, env, found, api_key, client_id, channel)))
            say(
                f"[waiters] {results['waiters_registered_in_hub']} waiting: RSS {results['waiters_10k_rss_mb']} MB, "
                f"{results['redis_subscriber_connections_of_process']} Redis subscription connection(s)"
            )
        results.update(
            proof(args, phases, env, found, keys, api_key)
            | refresh(args, phases, found, keys, channel, api_key)
            | overload(args, phases, env, api_key)
        )
        if "scale" in phases:  # not in the default run: loading a million flows takes minutes
            from bench.scale import scale_phase

            gen = Generator.choose(args.generator, args.connections)
            results.update(scale_phase(gen, found, keys, channel, api_key, client_id, args.duration))
    results["targets"] = TARGETS
    results["targets_missed"] = missed_targets(results, phases)
    results["targets_met"] = not results["targets_missed"]
    machine["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    results.update({"backends": found.description, "machine": machine, "server_impl": server_impl_args()})
    (DATA / "last.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
