"""Load clients for the benchmark, run as separate processes so they never share the server's CPU
time slice or event loop.

``throughput``: a closed-loop HTTP/1.1 keep-alive generator (the fallback when ``wrk`` is not
installed). Each connection sends one request, reads the whole response, and sends the next; the
request bytes are built once, so the client spends its time in the kernel, not in an HTTP library.

``open``: an open-loop generator (wrk2's model): requests are due at a fixed rate whatever the
server does, each on one of ``--connections`` keep-alive connections opened first; a request due
while every connection is busy waits for one, and its latency counts from when it was due (so a
server that falls behind is not let off by a client that slows down with it, wrk2's "coordinated
omission" correction). ``--profile RATE:SECONDS,...`` runs segments back to back. Every request
is written to ``--samples`` as one line ``due_offset_s latency_ms status`` (status 0: no answer,
the connection failed or ``--grace`` seconds after the last due time passed without one).

``waiters``: opens one connection per path and sends one long-poll on each, then holds them all
open until told to stop on stdin. It reports how many requests were sent and how many were
answered early (an early answer means the request was not really waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def build_request(method: str, host: str, port: int, path: str, headers: list[str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: keep-alive", *headers]
    if body or method != "GET":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one response with a Content-Length body; return its status code."""
    status, _ = await read_answer(reader)
    return status


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Read one response with a Content-Length body; return its status code and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        lowered = name.strip().lower()
        if lowered == b"content-length":
            length = int(value)
        elif lowered == b"transfer-encoding":
            raise RuntimeError("chunked responses are not supported by this generator")
    return status, await reader.readexactly(length) if length else b""


# ---- throughput ----------------------------------------------------------------------------------
async def _throughput(args: argparse.Namespace) -> dict[str, object]:
    body = args.body.encode() if args.body else b""
    request = build_request(args.method, args.host, args.port, args.path, args.header, body)
    counts = {"ok": 0, "non2xx": 0, "errors": 0}
    latencies: list[float] = []
    sent = 0
    measuring = False
    stop = False

    variants = args.variants

    def own(number: int) -> tuple[list[str], bytes]:
        """Connection ``number``'s headers and body: ``{t}`` is its own variant, if any."""
        if not variants:
            return args.header, body
        variant = variants[number % len(variants)]
        return [h.replace("{t}", variant) for h in args.header], body.replace(b"{t}", variant.encode())

    def next_request(fixed: bytes, headers: list[str], filled: bytes) -> bytes:
        """The connection's fixed request, or (``--unique-prefix``) one whose ``{n}`` never repeats."""
        nonlocal sent
        sent += 1
        if not args.unique_prefix:
            return fixed
        unique = filled.replace(b"{n}", f"{args.unique_prefix}{sent}".encode())
        return build_request(args.method, args.host, args.port, args.path, headers, unique)

    async def connection(number: int) -> None:
        headers, filled = own(number)
        fixed = build_request(args.method, args.host, args.port, args.path, headers, filled) if variants else request
        reader, writer = await asyncio.open_connection(args.host, args.port)
        try:
            while not stop:
                writer.write(next_request(fixed, headers, filled))
                began = time.perf_counter()
                try:
                    status = await read_response(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    counts["errors"] += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(args.host, args.port)
                    continue
                if measuring:
                    counts["ok" if 200 <= status < 300 else "non2xx"] += 1
                    latencies.append(time.perf_counter() - began)
        finally:
            writer.close()

    tasks = [asyncio.create_task(connection(number)) for number in range(args.connections)]
    await asyncio.sleep(args.warmup)
    measuring = True
    started = time.perf_counter()
    await asyncio.sleep(args.duration)
    measuring = False
    elapsed = time.perf_counter() - started
    stop = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ordered = sorted(latencies) or [0.0]
    return {
        "requests": counts["ok"],
        "non2xx": counts["non2xx"],
        "errors": counts["errors"],
        "seconds": elapsed,
        "rps": counts["ok"] / elapsed,
        "p50_ms": ordered[max(0, math.ceil(0.5 * len(ordered)) - 1)] * 1000,
        "p99_ms": ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] * 1000,
    }


# ---- open loop -----------------------------------------------------------------------------------
class _OpenLoop:
    """The open-loop generator's state: connections free to send, requests due and not yet sent,
    and every answer (due time, latency, status). Protocols, not streams: at a few thousand
    requests a second the generator shares two cores with the server it measures."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.loop = asyncio.get_running_loop()
        self.idle: collections.deque[_OpenConnection] = collections.deque()
        self.waiting: collections.deque[float] = collections.deque()
        self.done: list[tuple[float, float, int]] = []
        self.connections: list[_OpenConnection] = []

    def due(self, at: float) -> None:
        if self.idle:
            self.idle.popleft().send(at)
        else:
            self.waiting.append(at)

    def answered(self, conn: _OpenConnection, at: float, status: int) -> None:
        self.done.append((at, self.loop.time() - at, status))
        if status == 0:
            return
        if self.waiting:
            conn.send(self.waiting.popleft())
        else:
            self.idle.append(conn)

    def unanswered(self) -> list[float]:
        return [*self.waiting, *(c.at for c in self.connections if c.at is not None)]


class _OpenConnection(asyncio.Protocol):
    def __init__(self, gen: _OpenLoop) -> None:
        self.gen = gen
        self.buffer = b""
        self.at: float | None = None
        self.transport: Any = None  # uvloop's transports are no ``asyncio.Transport`` subclass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.gen.connections.append(self)
        self.gen.idle.append(self)

    def send(self, at: float) -> None:
        assert self.transport is not None
        self.at = at
        self.transport.write(self.gen.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            found = head.find(b"content-length:")
            stop = head.find(b"\r\n", found)
            length = int(head[found + 15 : stop if stop >= 0 else None]) if found >= 0 else 0
            total = end + 4 + length
            if len(self.buffer) < total or self.at is None:
                return
            at, self.at = self.at, None
            self.buffer = self.buffer[total:]
            self.gen.answered(self, at, int(head[9:12]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.at is not None:
            at, self.at = self.at, None
            self.gen.answered(self, at, 0)
        with contextlib.suppress(ValueError):
            self.gen.idle.remove(self)


async def _open_loop(args: argparse.Namespace) -> dict[str, Any]:
    raise_nofile()
    body = args.body.encode() if args.body else b""
    gen = _OpenLoop(build_request(args.method, args.host, args.port, args.path, args.header, body))
    segments = [(float(rate), float(seconds)) for rate, seconds in (p.split(":") for p in args.profile.split(","))]
    for _ in range(args.connections):
        await gen.loop.create_connection(lambda: _OpenConnection(gen), args.host, args.port)
    started = gen.loop.time()
    lag = 0.0
    scheduled = 0
    segment_start = started
    for rate, seconds in segments:
        count = round(rate * seconds)
        for i in range(count):
            at = segment_start + i / rate
            now = gen.loop.time()
            if at > now:
                await asyncio.sleep(at - now)
            else:
                lag = max(lag, now - at)
            gen.due(at)
        scheduled += count
        segment_start += seconds
    while len(gen.done) < scheduled and gen.loop.time() < segment_start + args.grace:  # noqa: ASYNC110 - answers are counted, not signalled
        await asyncio.sleep(0.05)
    unanswered = gen.unanswered()
    for conn in gen.connections:
        if conn.transport is not None:
            conn.transport.close()
    lines = [f"{at - started:.6f} {seconds * 1000:.3f} {status}\n" for at, seconds, status in gen.done]
    # Due and never answered: still waiting for a connection, or sent and never answered.
    lines += [f"{at - started:.6f} -1 0\n" for at in unanswered]
    return {
        "lines": lines,
        "scheduled": scheduled,
        "answered": len(gen.done),
        "unanswered": len(unanswered),
        "max_schedule_lag_ms": round(lag * 1000, 2),
    }


# ---- waiters -------------------------------------------------------------------------------------
async def _waiters(args: argparse.Namespace, paths: list[str]) -> None:
    limit = raise_nofile()
    headers = [f"Authorization: Bearer {args.api_key}"]
    writers: list[asyncio.StreamWriter] = []
    answered: dict[int, int] = {}
    readers: list[asyncio.Task[None]] = []
    failures = 0

    async def open_one(path: str) -> None:
        nonlocal failures
        for attempt in range(20):
            try:
                reader, writer = await asyncio.open_connection(args.host, args.port)
                break
            except OSError:
                failures += 1
                await asyncio.sleep(0.05 * (attempt + 1))
        else:
            raise RuntimeError("could not connect")
        writer.write(build_request("GET", args.host, args.port, path, headers, b""))
        writers.append(writer)

        async def wait_answer() -> None:
            with contextlib.suppress(Exception):
                status = await read_response(reader)
                answered[status] = answered.get(status, 0) + 1

        readers.append(asyncio.create_task(wait_answer()))

    async def registered() -> int:
        """The server's own count of parked waiters (the benchmark's stats route)."""
        reader, writer = await asyncio.open_connection(args.host, args.port)
        try:
            writer.write(build_request("GET", args.host, args.port, args.stats_path, [], b""))
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(
                    v for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
                )
            )
            return int(json.loads(await reader.readexactly(length))["waiters"])
        finally:
            writer.close()

    started = time.perf_counter()
    for start in range(0, len(paths), args.batch):
        await asyncio.gather(*(open_one(p) for p in paths[start : start + args.batch]))
        # Waiters arrive in batches, each once the previous one is parked: a steady arrival rate,
        # not one 10,000-request burst (whose first reads would all queue for the database pool).
        deadline = time.monotonic() + 60
        while await registered() < len(writers) - sum(answered.values()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(args.pause)
    print(
        json.dumps(
            {
                "event": "sent",
                "count": len(writers),
                "seconds": time.perf_counter() - started,
                "connect_retries": failures,
                "nofile": limit,
            }
        ),
        flush=True,
    )
    # Hold everything open until the benchmark has measured, then report and close.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(
        json.dumps(
            {
                "event": "done",
                "answered_early": sum(answered.values()),
                "statuses": {str(k): v for k, v in answered.items()},
            }
        ),
        flush=True,
    )
    for writer in writers:
        writer.close()
    for task in readers:
        task.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--host", default="127.0.0.1")
    tp.add_argument("--port", type=int, required=True)
    tp.add_argument("--path", required=True)
    tp.add_argument("--method", default="GET")
    tp.add_argument("--header", action="append", default=[])
    tp.add_argument("--body", default="")
    tp.add_argument("--unique-prefix", default="", help="replace {n} in the body by this prefix and a counter")
    tp.add_argument("--variants-file", default="", help="one value a line: connection i puts line i (mod n) for {t}")
    tp.add_argument("--connections", type=int, default=32)
    tp.add_argument("--duration", type=float, default=8.0)
    tp.add_argument("--warmup", type=float, default=1.0)
    op = sub.add_parser("open")
    op.add_argument("--host", default="127.0.0.1")
    op.add_argument("--port", type=int, required=True)
    op.add_argument("--path", required=True)
    op.add_argument("--method", default="GET")
    op.add_argument("--header", action="append", default=[])
    op.add_argument("--body", default="")
    op.add_argument("--connections", type=int, default=256)
    op.add_argument("--profile", required=True, help="RATE:SECONDS[,RATE:SECONDS...] requests a second, for how long")
    op.add_argument("--grace", type=float, default=5.0, help="seconds after the last due time to wait for answers")
    op.add_argument("--samples", required=True, help="file for one line per request")
    wt = sub.add_parser("waiters")
    wt.add_argument("--host", default="127.0.0.1")
    wt.add_argument("--port", type=int, required=True)
    wt.add_argument("--api-key", required=True)
    wt.add_argument("--paths-file", required=True)
    wt.add_argument("--batch", type=int, default=500)
    wt.add_argument("--pause", type=float, default=0.05)
    wt.add_argument("--stats-path", default="/_bench/stats")
    args = parser.parse_args()
    if args.mode == "throughput":
        args.variants = Path(args.variants_file).read_text().split() if args.variants_file else []
        print(json.dumps(asyncio.run(_throughput(args))), flush=True)
    elif args.mode == "open":
        with contextlib.suppress(ImportError):
            import uvloop  # the generator's own loop must not be what falls behind

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        summary = asyncio.run(_open_loop(args))
        Path(args.samples).write_text("".join(summary.pop("lines")))
        print(json.dumps(summary), flush=True)
    else:
        paths = [line.strip() for line in Path(args.paths_file).read_text().splitlines() if line.strip()]
        asyncio.run(_waiters(args, paths))


if __name__ == "__main__":
    main()
