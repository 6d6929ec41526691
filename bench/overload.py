"""The overload phase (``make bench PHASES=overload``): elicitd offered more than it can take.

A closed-loop benchmark never offers more than the server answers: each connection waits for its
answer before sending the next. Here ``bench/loadgen.py open`` sends status reads at a fixed
rate, whatever the server does, at 0.5, 1, 1.5 and 2 times the capacity measured just before with
the closed-loop generator; the 2x level drops to 0.5x for a few seconds at its end, to see how fast
latency comes back. Then the same 2x-and-drop runs against a server with no admission bound
(``ELICITD_MAX_IN_FLIGHT=0``), to show what the bound changes.

Per level: the admitted requests' p50/p99 (latency from when each was due, so a server that falls
behind is charged for it), how many were refused ``503 overloaded`` and how long their answers
took, how many got no answer at all, and the server's RSS (highest while the level ran).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.harness import DATA, Generator, Server, Target

LEVELS = (0.5, 1.0, 1.5, 2.0)
DROP_TO = 0.5
DROP_SECONDS = 3.0
WINDOW = 0.1
OPEN_CONNECTIONS = 256
DEFAULT_BOUND = 64  # ELICITD_MAX_IN_FLIGHT's default (service/settings.py)

TARGETS: dict[str, float] = {
    # At 2x: admitted p99 at most 3x the p99 at 0.5x; refusals answered within 50 ms; every request
    # answered; RSS within 10 % of its value at 1x; back to 0.5x latency within a second.
    "overload_p99_over_half_max": 3.0,
    "overload_refused_max_ms_max": 50.0,
    "overload_unanswered_max": 0,
    "overload_rss_over_1x_max": 1.10,
    "overload_recovery_seconds_max": 1.0,
}


def _rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def _samples(path: Path) -> list[tuple[float, float, int]]:
    rows = []
    for line in path.read_text().splitlines():
        at, ms, status = line.split()
        rows.append((float(at), float(ms), int(status)))
    return rows


def level_figures(rows: list[tuple[float, float, int]], offered: float, seconds: float) -> dict[str, Any]:
    ok = sorted(ms for _, ms, s in rows if 200 <= s < 300)
    refused = sorted(ms for _, ms, s in rows if s == 503)
    return {
        "offered_rps": round(offered, 1),
        "admitted": len(ok),
        "admitted_rps": round(len(ok) / seconds, 1),
        "admitted_p50_ms": round(_rank(ok, 0.5), 2),
        "admitted_p99_ms": round(_rank(ok, 0.99), 2),
        "refused": len(refused),
        "refused_p50_ms": round(_rank(refused, 0.5), 2),
        "refused_max_ms": round(refused[-1], 2) if refused else 0.0,
        "other_status": sum(1 for _, _, s in rows if s not in (0, 503) and not 200 <= s < 300),
        "unanswered": sum(1 for _, _, s in rows if s == 0),
    }


def _recovery(rows: list[tuple[float, float, int]], start: float, end: float, limit_ms: float) -> float:
    """Seconds from ``start`` (the drop) to the first 100 ms window after which every request was
    admitted and answered within ``limit_ms``; the whole tail when none."""
    bad = [at for at, ms, s in rows if start <= at < end and not (200 <= s < 300 and 0 <= ms <= limit_ms)]
    if not bad:
        return 0.0
    return round(min(end - start, (math.floor((max(bad) - start) / WINDOW) + 1) * WINDOW), 2)


@contextmanager
def _rss_watch(pid: int) -> Iterator[list[int]]:
    """The process's RSS every 50 ms while the block runs (bytes)."""
    seen: list[int] = []
    stop = threading.Event()
    proc = psutil.Process(pid)

    def watch() -> None:
        while not stop.is_set():
            seen.append(proc.memory_info().rss)
            stop.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def open_loop(server: Server, path: str, headers: tuple[str, ...], profile: list[tuple[float, float]], tag: str) -> Any:
    samples = DATA / f"overload-{tag}.txt"
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("loadgen.py")),
        "open",
        "--port",
        str(server.port),
        "--path",
        path,
        "--connections",
        str(OPEN_CONNECTIONS),
        "--profile",
        ",".join(f"{rate:.1f}:{seconds:g}" for rate, seconds in profile),
        "--samples",
        str(samples),
    ]
    for header in headers:
        cmd += ["--header", header]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1]), _samples(samples)


def _flow(url: str, api_key: str) -> str:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as http:
        made = http.post(
            "/v1/flows",
            json={
                "subject": {"iss": "https://id.bench.example", "sub": "overload"},
                "kind": "external",
                "url": "https://mcp.bench.example/step",
            },
        )
        assert made.status_code == 201, made.text
        flow_id = str(made.json()["flow"]["id"])
        done = http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
        assert done.status_code == 200, done.text
    return flow_id


def _run_levels(
    server: Server,
    path: str,
    headers: tuple[str, ...],
    capacity: float,
    seconds: float,
    levels: tuple[float, ...],
    half_p99: float | None = None,
) -> dict[str, Any]:
    pid = httpx.get(f"{server.url}/_bench/stats").json()["pid"]
    figures: dict[str, Any] = {}
    for factor in levels:
        rate = factor * capacity
        profile = [(rate, seconds)]
        if factor == max(levels):
            profile.append((DROP_TO * capacity, DROP_SECONDS))
        with _rss_watch(pid) as rss:
            summary, rows = open_loop(server, path, headers, profile, f"{factor:g}x")
        level = level_figures([r for r in rows if r[0] < seconds], rate, seconds)
        level["rss_mb"] = round(max(rss) / 2**20, 1)
        level["rss_after_mb"] = round(psutil.Process(pid).memory_info().rss / 2**20, 1)
        level["schedule_lag_max_ms"] = summary["max_schedule_lag_ms"]
        if len(profile) > 1:
            half = half_p99 or figures.get("0.5x", {}).get("admitted_p99_ms") or level["admitted_p99_ms"]
            limit = 3 * half
            level["recovery_seconds"] = _recovery(rows, seconds, seconds + DROP_SECONDS, limit)
            level["recovery_limit_ms"] = round(limit, 2)
            tail = level_figures([r for r in rows if r[0] >= seconds], DROP_TO * capacity, DROP_SECONDS)
            level["after_drop"] = tail
        figures[f"{factor:g}x"] = level
        print(f"[overload] {factor:g}x {json.dumps(level)}", file=sys.stderr, flush=True)
    return figures


def overload_phase(gen: Generator, env: dict[str, str], api_key: str, seconds: float = 5.0) -> dict[str, Any]:
    bench_env = dict(env, ELICITD_BENCH_STATS="1")
    # The bound under test: the default unless ELICITD_BENCH_OVERLOAD_BOUND names another.
    bound = os.environ.get("ELICITD_BENCH_OVERLOAD_BOUND")
    if bound:
        bench_env["ELICITD_MAX_IN_FLIGHT"] = bound
    auth = (f"Authorization: Bearer {api_key}",)
    server = Server("elicitd-overload", "elicitd_factory:create", bench_env).start()
    try:
        flow_id = _flow(server.url, api_key)
        path = f"/v1/flows/{flow_id}"
        target = Target("status", f"{server.url}{path}", headers=auth)
        gen.run(target, 2.0)
        closed = gen.run(target, seconds)
        capacity = closed["rps"]
        print(
            f"[overload] capacity (closed loop, {gen.connections} connections): {capacity:.0f} req/s", file=sys.stderr
        )
        bounded = _run_levels(server, path, auth, capacity, seconds, LEVELS)
        refusals = _metric(server.url, "elicitd_overloaded_total")
    finally:
        server.stop()
    unbounded_server = Server(
        "elicitd-overload-unbounded", "elicitd_factory:create", dict(bench_env, ELICITD_MAX_IN_FLIGHT="0")
    )
    unbounded_server.start()
    try:
        flow_id = _flow(unbounded_server.url, api_key)
        gen.run(Target("status", f"{unbounded_server.url}/v1/flows/{flow_id}", headers=auth), 2.0)
        half_p99 = bounded["0.5x"]["admitted_p99_ms"]
        unbounded = _run_levels(unbounded_server, f"/v1/flows/{flow_id}", auth, capacity, seconds, (1.0, 2.0), half_p99)
    finally:
        unbounded_server.stop()
    half, one, two = bounded["0.5x"], bounded["1x"], bounded["2x"]
    return {
        "overload_max_in_flight": int(bound) if bound else DEFAULT_BOUND,
        "overload_capacity_rps": round(capacity, 1),
        "overload_capacity_p99_ms": round(closed["p99_ms"], 2),
        "overload_seconds_per_level": seconds,
        "overload_levels": bounded,
        "overload_unbounded_levels": unbounded,
        "overload_metric_refusals": refusals,
        "overload_p99_over_half": round(two["admitted_p99_ms"] / half["admitted_p99_ms"], 2),
        "overload_refused_max_ms": max(level["refused_max_ms"] for level in bounded.values()),
        "overload_unanswered": sum(level["unanswered"] for level in bounded.values()),
        "overload_rss_over_1x": round(two["rss_mb"] / one["rss_mb"], 3),
        "overload_recovery_seconds": two["recovery_seconds"],
    }


def _metric(url: str, name: str) -> float | None:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def overload_checks(results: dict[str, Any]) -> dict[str, bool]:
    t, r = TARGETS, results
    return {
        "overload_p99_over_half": r.get("overload_p99_over_half", 1e9) <= t["overload_p99_over_half_max"],
        "overload_refused_max_ms": r.get("overload_refused_max_ms", 1e9) <= t["overload_refused_max_ms_max"],
        "overload_unanswered": r.get("overload_unanswered", 1) <= t["overload_unanswered_max"],
        "overload_rss_over_1x": abs(r.get("overload_rss_over_1x", 1e9) - 1) <= t["overload_rss_over_1x_max"] - 1,
        "overload_recovery_seconds": r.get("overload_recovery_seconds", 1e9) <= t["overload_recovery_seconds_max"],
    }
