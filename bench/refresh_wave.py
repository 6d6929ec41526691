"""``make bench PHASES=refresh``: a wave of proactive refreshes against a paced provider, and what
it costs the API.

10,000 connections whose tokens all expire within the same two minutes are seeded with one bulk
``INSERT`` (their tokens sealed by the vault, as every token is) for a provider whose token
endpoint is a stub in this process (``ProviderStub``: a bare HTTP/1.1 server on its own thread and
event loop, answering every refresh with a new access token and noting when each request came).
One elicitd server refreshes them with its own background refresher — the code every serving
replica runs — at ``ELICITD_REFRESH_PROVIDER_RATE`` calls a second. Measured:

* ``refresh_count`` (the stub's refresh calls: exactly one per connection), ``refresh_seconds``
  and ``refreshes_per_second`` (first call to last), ``refresh_max_in_any_second`` (the most
  calls the stub saw in any one-second window, against the configured rate);
* ``refresh_rest_p99_ms`` / ``refresh_wave_p99_ms``: the token endpoint's p99 for a connection
  that needs no refresh, on the same server, before the wave and during it
  (``refresh_wave_over_rest_p99``; target ≤ 1.5).

The API's load is open-loop (``bench/loadgen.py open``) at a fixed share of the capacity measured
just before (``ELICITD_BENCH_REFRESH_LOAD``, 0.5 by default): a closed-loop generator keeps the
server saturated, and a saturated server's p99 measures only what share of the CPU the wave takes,
not what the wave does to a request that arrives while it runs. Latency counts from when a request
was due, so a server that falls behind during the wave is charged for it.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.harness import DATA, ROOT, Backends, Generator, Server, Target, free_port, server_env
from bench.overload import level_figures, open_loop

PROVIDER = "wavehub"
# The wave's API load runs in segments of this long, back to back, until the wave is done.
SEGMENT_SECONDS = 5.0
ISS = "https://id.bench.example"


class ProviderStub:
    """A provider's token endpoint that answers every ``refresh_token`` grant at once (a new access
    token, an hour; the refresh token kept), on a thread of its own so the measured server's load
    never delays it. ``times`` holds each refresh's arrival (monotonic seconds)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="provider-stub", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProviderStub:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.times)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=512))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                if b"grant_type=refresh_token" in body:
                    with self._lock:
                        self.times.append(time.monotonic())
                answer = json.dumps(
                    {"access_token": f"at_{uuid.uuid4().hex}", "token_type": "Bearer", "expires_in": 3600}
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                    + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def max_in_any_second(self) -> int:
        with self._lock:
            times = sorted(self.times)
        return max((bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times)), default=0)


async def seed(database_url: str, keys: str, count: int, stub_url: str) -> None:
    """The provider, then ``count`` connections (each with its one authorization) due within two
    minutes, in one bulk ``INSERT`` per table."""
    import asyncpg

    from service.connections.sealing import ACCESS_TOKEN, REFRESH_TOKEN, binding
    from service.crypto.vault import Vault
    from service.db.base import CONNECTION_ID, uuid7
    from service.settings import KeyRing

    vault = Vault(KeyRing.parse(keys, name="ELICITD_KEYS"))
    ids, subs, accounts, access, access_kid, refresh, refresh_kid = [], [], [], [], [], [], []
    for n in range(count):
        cid, sub, account = uuid7(), f"wave-{n}", f"acct-{n}"
        bound = binding(ISS, sub, PROVIDER, account)
        owner = CONNECTION_ID.format(cid)
        a_kid, a_enc = vault.encrypt(f"at_seed_{n}", owner=owner, purpose=ACCESS_TOKEN, bound=bound)
        r_kid, r_enc = vault.encrypt(f"rt_seed_{n}", owner=owner, purpose=REFRESH_TOKEN, bound=bound)
        ids.append(cid)
        subs.append(sub)
        accounts.append(account)
        access.append(a_enc)
        access_kid.append(a_kid)
        refresh.append(r_enc)
        refresh_kid.append(r_kid)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO providers (name, display_name, client_id, authorization_endpoint, token_endpoint, "
            "token_auth_method) VALUES ($1, 'Wave', 'bench-wave', $2, $3, 'none')",
            PROVIDER,
            f"{stub_url}/authorize",
            f"{stub_url}/token",
        )
        # Spread over the two minutes, as a day's sign-ins would be: all of them inside the
        # refresher's five-minute margin at once.
        await conn.execute(
            "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, account_login, scopes, "
            "expires_at, status) SELECT id, $2, sub, $3, account, account, '{repo}', "
            "now() + make_interval(secs => 120.0 * ord / $4), 'active' "
            "FROM unnest($1::uuid[], $5::text[], $6::text[]) WITH ORDINALITY AS t(id, sub, account, ord)",
            ids,
            ISS,
            PROVIDER,
            count,
            subs,
            accounts,
        )
        await conn.execute(
            "INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, scopes, "
            "access_token_enc, access_token_key_id, refresh_token_enc, refresh_token_key_id, expires_at, "
            "checked_at, status) "
            "SELECT c.id, c.id, c.subject_iss, c.subject_sub, c.provider, c.account_id, c.scopes, "
            "t.a, t.ak, t.r, t.rk, c.expires_at, now(), 'active' "
            "FROM unnest($1::uuid[], $2::bytea[], $3::text[], $4::bytea[], $5::text[]) AS t(id, a, ak, r, rk) "
            "JOIN connections c ON c.id = t.id",
            ids,
            access,
            access_kid,
            refresh,
            refresh_kid,
        )
    finally:
        await conn.close()


async def refreshed_rows(database_url: str) -> tuple[int, int]:
    """(authorizations of the wave refreshed, those still due within the refresher's margin)."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE refreshed_at IS NOT NULL) AS done, "
            "count(*) FILTER (WHERE expires_at <= now() + interval '5 minutes') AS due "
            "FROM authorizations WHERE provider = $1",
            PROVIDER,
        )
        assert row is not None
        return int(row["done"]), int(row["due"])
    finally:
        await conn.close()


def refresh_phase(
    gen: Generator,
    found: Backends,
    keys: str,
    channel: str,
    api_key: str,
    token_path: str,
    *,
    count: int = 10_000,
    rate: float = 500.0,
    duration: float = 3.0,
    load: float = 0.5,
    worker: bool = True,
) -> dict[str, Any]:
    stub = ProviderStub().start()
    # Small passes back to back (a full pass is followed at once): each claims what it starts in
    # well under a second, so a slow moment of the machine never leaves claims unused.
    batch = max(1, int(rate / 2))
    env = server_env(
        found,
        keys,
        channel,
        ELICITD_REFRESH_PROACTIVE="true",
        ELICITD_REFRESH_PROVIDER_RATE=str(rate),
        ELICITD_REFRESH_BATCH_SIZE=str(batch),
        ELICITD_REFRESH_CONCURRENCY="16",
        ELICITD_REFRESH_PASS_SECONDS="0.2",
        ELICITD_PROBE_ENABLED="false",
    )
    # With ``worker``, the server answers requests only (``ELICITD_BACKGROUND_TASKS=false``) and
    # ``elicitd worker`` runs the refresher beside it at a lower CPU priority, as docs/scaling.md
    # deploys it; without, the server's own background refresher does, on its request loop.
    app = Server(
        "elicitd-refresh", "elicitd_factory:create", dict(env, ELICITD_BACKGROUND_TASKS="false") if worker else env
    ).start()
    upkeep = (
        subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--nice", "10"],
            cwd=ROOT, env=dict(env, ELICITD_PUBLIC_URL=app.url),
            stdout=subprocess.DEVNULL, stderr=(DATA / "logs" / "elicitd-refresh-worker.log").open("wb"),
        )
        if worker
        else None
    )  # fmt: skip
    path = token_path
    headers = (f"Authorization: Bearer {api_key}",)
    try:
        token = Target("token", f"{app.url}{path}", headers=headers)
        gen.run(token, 2.0)  # warm-up
        capacity = gen.run(token, duration)["rps"]
        offered = capacity * load
        rest_seconds = max(duration, SEGMENT_SECONDS)
        rest = level_figures(
            open_loop(app, path, headers, [(offered, rest_seconds)], "refresh-rest")[1], offered, rest_seconds
        )
        asyncio.run(seed(found.database_url, keys, count, stub.url))
        seeded_at = time.monotonic()
        # ``ELICITD_BENCH_REFRESH_PROFILE=FILE``: py-spy's collapsed stacks of the server during the wave.
        profile = os.environ.get("ELICITD_BENCH_REFRESH_PROFILE")
        spy = None
        if profile and app.process is not None:
            spy = subprocess.Popen(
                [shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")), "record", "--format",
                 "raw", "--rate", "250", "-o", profile, "--pid", str(app.process.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        limit = count / rate * 3 + 60
        rows: list[tuple[float, float, int]] = []
        segments = 0
        while stub.count < count and time.monotonic() - seeded_at < limit:
            rows += open_loop(app, path, headers, [(offered, SEGMENT_SECONDS)], "refresh-wave")[1]
            segments += 1
        finished_at = time.monotonic()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        wave = level_figures(rows, offered, segments * SEGMENT_SECONDS or 1.0)
        done, due = asyncio.run(refreshed_rows(found.database_url))
    finally:
        if upkeep is not None:
            upkeep.send_signal(signal.SIGTERM)
            upkeep.wait(30)
        app.stop()
        stub.stop()
    times = sorted(stub.times)
    spread = (times[-1] - times[0]) if len(times) > 1 else 0.0
    rest_p99, wave_p99 = rest["admitted_p99_ms"], wave["admitted_p99_ms"]
    return {
        "refresh_in": "worker" if worker else "server",
        "refresh_connections": count,
        "refresh_rate_configured": rate,
        "refresh_count": len(times),
        "refresh_rows_refreshed": done,
        "refresh_rows_still_due": due,
        "refresh_seconds": round(spread, 2),
        "refresh_seconds_from_seed": round((times[-1] - seeded_at) if times else finished_at - seeded_at, 2),
        "refreshes_per_second": round((len(times) - 1) / spread, 1) if spread else 0.0,
        "refresh_max_in_any_second": stub.max_in_any_second(),
        "refresh_api_capacity_rps": round(capacity, 1),
        "refresh_api_offered_rps": round(offered, 1),
        "refresh_rest_p50_ms": rest["admitted_p50_ms"],
        "refresh_rest_p99_ms": rest_p99,
        "refresh_wave_p50_ms": wave["admitted_p50_ms"],
        "refresh_wave_p99_ms": wave_p99,
        "refresh_rest_rps": rest["admitted_rps"],
        "refresh_wave_rps": wave["admitted_rps"],
        "refresh_wave_failed": wave["unanswered"] + wave["other_status"] + wave["refused"],
        "refresh_wave_over_rest_p99": round(wave_p99 / rest_p99, 2) if rest_p99 else None,
    }


def token_path(provider: str, sub: str) -> str:
    return f"/v1/connections/{provider}/token?" + urlencode({"iss": ISS, "sub": sub})
