"""CPU per request without HTTP: ``python bench/inproc.py [--requests 1000] [--repeats 9] [--targets …]``.

The throughput phase's ratios are req/s over the floor's on a machine whose two cores also run
PostgreSQL, Redis and the load generator; what they come down to is the server's CPU per request.
This measures that directly: the floor (``bench/floor_factory.py``) and elicitd (as
``bench/elicitd_factory.py`` builds it) run in this process, on uvloop, each through its ASGI
lifespan; each target is called through ASGI ``--requests`` times, one after the other, and the
process's CPU time (``time.process_time``) per call is printed, the least of ``--repeats``
series (the machine's other load only ever adds to a series; the targets take turns within
each), with the whole machine's busy CPU (PostgreSQL's share too) and the wall time per call. No
socket is read or written for the request itself (uvicorn's parsing and writes are the same for
both apps), so the figures are the application's own cost plus the database round
trip's client side. Same backends and setup as ``bench/run.py``; request log lines go to
``.data/bench/logs/inproc.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import uvloop

from bench.harness import DATA, backends, server_env
from bench.run import SUBJECT, TOKEN_PROVIDER, TOKEN_SUB, make_client, make_connection
from service.settings import KeyRing

App = Callable[
    [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]


class Lifespan:
    """Runs an ASGI app's lifespan in a task: ``start`` returns once it started, ``stop`` once it stopped."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self.task = asyncio.ensure_future(self.app(scope, self.inbox.get, self.outbox.put))
        await self.inbox.put({"type": "lifespan.startup"})
        message = await self.outbox.get()
        assert message["type"] == "lifespan.startup.complete", message

    async def stop(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self.outbox.get()
        assert self.task is not None
        await self.task


async def call(
    app: App, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> tuple[int, bytes]:
    """One request through ASGI: the status and the body."""
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers, (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 0
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent busy (every process: PostgreSQL's too)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def measure(
    app: App, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes, n: int
) -> tuple[float, float, float]:
    """This process's CPU, the machine's CPU and the wall time, µs per request, over ``n`` serial
    requests (each must answer 2xx)."""
    started, busy, wall = time.process_time(), machine_busy(), time.perf_counter()
    for _ in range(n):
        status, answer = await call(app, method, path, headers, body)
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path} answered {status}: {answer[:300]!r}")
    own = (time.process_time() - started) / n * 1e6
    return own, (machine_busy() - busy) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


async def run(args: argparse.Namespace, env: dict[str, str]) -> dict[str, dict[str, float]]:
    os.environ.update(env)
    import elicitd_factory
    import floor_factory

    floor = floor_factory.create()
    elicitd = elicitd_factory.create()
    # The same app with the hot routes left to Litestar (``ELICITD_HOT_ROUTES=false``): the
    # ``status-litestar`` and ``resolve-litestar`` targets.
    os.environ["ELICITD_HOT_ROUTES"] = "false"
    plain = elicitd_factory.create()
    del os.environ["ELICITD_HOT_ROUTES"]
    spans = [Lifespan(floor), Lifespan(elicitd), Lifespan(plain)]
    for span in spans:
        await span.start()
    try:
        auth = [(b"authorization", f"Bearer {env['BENCH_API_KEY']}".encode())]
        json_type = [(b"content-type", b"application/json")]
        created_body = json.dumps(
            {"subject": SUBJECT, "kind": "external", "url": "https://mcp.bench.example/step", "context": {}}
        ).encode()
        status, answer = await call(elicitd, "POST", "/v1/flows", auth + json_type, created_body)
        assert status == 201, answer
        created = json.loads(answer)
        flow_id = created["flow"]["id"]
        done = json.dumps({"result": {"ok": True}}).encode()
        status, answer = await call(elicitd, "POST", f"/v1/flows/{flow_id}/complete", auth + json_type, done)
        assert status == 200, answer
        raw_id = uuid.UUID(hex=flow_id.removeprefix("fl_"))
        resolve = json.dumps(
            {
                "subject": SUBJECT,
                "request_state": created["mcp"]["requestState"],
                "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
            }
        ).encode()
        query = urlencode({"iss": SUBJECT["iss"], "sub": TOKEN_SUB})
        targets: dict[str, tuple[App, str, str, list[tuple[bytes, bytes]], bytes]] = {
            "floor": (floor, "GET", f"/flows/{raw_id}", [], b""),
            "status": (elicitd, "GET", f"/v1/flows/{flow_id}", auth, b""),
            "resolve": (elicitd, "POST", "/v1/flows/resolve", auth + json_type, resolve),
            "token": (elicitd, "GET", f"/v1/connections/{TOKEN_PROVIDER}/token?{query}", auth, b""),
            "status-litestar": (plain, "GET", f"/v1/flows/{flow_id}", auth, b""),
            "resolve-litestar": (plain, "POST", "/v1/flows/resolve", auth + json_type, resolve),
        }
        chosen = [name for name in args.targets.split(",") if name]
        series: dict[str, list[tuple[float, float, float]]] = {name: [] for name in chosen}
        for name in chosen:
            await measure(*targets[name], n=max(200, args.requests // 10))  # warm up
        for _ in range(args.repeats):
            for name in chosen:
                series[name].append(await measure(*targets[name], n=args.requests))
        return {
            name: {
                field: round(min(value[i] for value in values), 1)
                for i, field in enumerate(("process", "machine", "wall"))
            }
            for name, values in series.items()
        }
    finally:
        for span in reversed(spans):
            await span.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--targets", default="floor,status,resolve,token")
    args = parser.parse_args()
    keys = KeyRing.generate_entry("bench1")
    (DATA / "logs").mkdir(parents=True, exist_ok=True)
    with backends() as found:
        api_key, client_id = asyncio.run(make_client(found.database_url))
        asyncio.run(make_connection(found.database_url, keys, client_id))
        env = server_env(
            found, keys, "elicitd:bench:" + secrets.token_hex(4), ELICITD_PUBLIC_URL="http://127.0.0.1:8000"
        )
        env["BENCH_API_KEY"] = api_key
        log = (DATA / "logs" / "inproc.log").open("w")
        os.dup2(log.fileno(), 2)
        figures = uvloop.run(run(args, env))
    for name, figure in figures.items():
        own, machine, wall = figure["process"], figure["machine"], figure["wall"]
        print(f"{name:16} µs per request: this process {own:7.1f}  machine {machine:7.1f}  wall {wall:7.1f}")
    print(json.dumps({"us_per_request": figures}))


if __name__ == "__main__":
    main()
