"""Load clients for the benchmark, run as separate processes so they never share the server's CPU
time slice or event loop.

``throughput``: a closed-loop HTTP/1.1 keep-alive generator (the fallback when ``wrk`` is not
installed). Each connection sends one request, reads the whole response, and sends the next; the
request bytes are built once, so the client spends its time in the kernel, not in an HTTP library.

``waiters``: opens one connection per path and sends one long-poll on each, then holds them all
open until told to stop on stdin. It reports how many requests were sent and how many were
answered early (an early answer means the request was not really waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import resource
import sys
import time
from pathlib import Path


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

    def next_request() -> bytes:
        """The fixed request, or (``--unique-prefix``) one whose ``{n}`` never repeats."""
        nonlocal sent
        sent += 1
        if not args.unique_prefix:
            return request
        unique = body.replace(b"{n}", f"{args.unique_prefix}{sent}".encode())
        return build_request(args.method, args.host, args.port, args.path, args.header, unique)

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(args.host, args.port)
        try:
            while not stop:
                writer.write(next_request())
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

    tasks = [asyncio.create_task(connection()) for _ in range(args.connections)]
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
    tp.add_argument("--connections", type=int, default=32)
    tp.add_argument("--duration", type=float, default=8.0)
    tp.add_argument("--warmup", type=float, default=1.0)
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
        print(json.dumps(asyncio.run(_throughput(args))), flush=True)
    else:
        paths = [line.strip() for line in Path(args.paths_file).read_text().splitlines() if line.strip()]
        asyncio.run(_waiters(args, paths))


if __name__ == "__main__":
    main()
