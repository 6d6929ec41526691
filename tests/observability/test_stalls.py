"""The event-loop stall monitor, and what it must show: browser logins never hold the loop that
serves a thousand parked long-polls.

The load test runs elicitd as its own process (``elicitd serve``, as in production): the
measurement is of the server's event loop, which the test's own HTTP clients must not share. It
asserts on the loop's own CPU share of each stall (``elicitd_event_loop_blocked_*``) and prints the
wall-clock stall beside it: on a shared 2-core host the wall clock also counts the time the host
gave other processes instead, which no change to elicitd can remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncSession

from service.consent.receipts import ReceiptSigner
from service.crypto.vault import Vault
from service.db.base import FLOW_ID, uuid7
from service.db.engine import make_engine, make_sessionmaker
from service.db.unit import unit_of_work
from service.embedded import free_port
from service.flows import repository as flow_repo
from service.identity.clients import create_server_client
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.observability.stalls import StallMonitor
from service.settings import KeyRing, Settings
from tests.support.oauth_server import OAuthServer

ROOT = Path(__file__).resolve().parents[2]
# The longest the loop's own thread may be held in one tick while the logins run. A tick holds
# every callback whose event became ready while the loop waited, so on a host whose cores are
# shared the same work arrives in fuller ticks: on a quiet 2-core machine this run's longest tick
# is 2-7 ms, beside the rest of the suite (CI) 11-16 ms. The regression this test exists for — an
# HTTP client (and its TLS context, ~20 ms of CPU) built per login — holds ticks of 60-130 ms.
STALL_LIMIT_SECONDS = 0.025
STALL_LIMIT_BUCKET = str(STALL_LIMIT_SECONDS)  # its histogram bucket bound, as /metrics writes it
PARKED = 1000
LOGINS = 20
WAIT_SECONDS = 120
# People do not press "sign in" in the same millisecond: login i starts i * 25 ms after the first,
# so the 20 overlap (each takes a few hundred ms) without arriving as one scripted burst. A burst of
# 20 requests in the same instant costs one loop iteration ~0.5 ms each whatever they are for.
STAGGER_SECONDS = 0.025


# ---- the monitor itself -----------------------------------------------------------------------------
def _spin(seconds: float) -> None:
    """Hold the loop on the CPU, as a synchronous burst of work would."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def test_a_held_loop_is_measured_and_each_scrape_starts_a_new_period() -> None:
    registry = CollectorRegistry()
    monitor = StallMonitor(registry, interval=0.002)

    def sample(name: str, **labels: str) -> float:
        found = registry.get_sample_value(name, labels)
        assert found is not None
        return found

    def ticks() -> float:
        return sample("elicitd_event_loop_stall_seconds_count")

    async def next_ticks(count: int) -> None:
        seen = ticks()
        while ticks() < seen + count:
            await asyncio.sleep(0.001)

    monitor.start()
    try:
        await next_ticks(3)  # running: some ordinary ticks first
        monitor.publish_max()
        _spin(0.05)  # the loop's own work
        await next_ticks(1)
        stall, blocked = monitor.publish_max()
        assert stall >= 0.045
        assert blocked >= 0.045
        assert sample("elicitd_event_loop_stall_max_seconds") == stall
        assert sample("elicitd_event_loop_blocked_max_seconds") == blocked

        time.sleep(0.05)  # the thread is held but spends no CPU (the host's doing, not the loop's work)
        await next_ticks(1)
        stall, blocked = monitor.publish_max()
        assert stall >= 0.045
        assert blocked < 0.02

        await next_ticks(3)
        assert monitor.publish_max()[0] < 0.045  # the pauses belonged to the previous periods
    finally:
        await monitor.stop()
    for name in ("elicitd_event_loop_stall_seconds_bucket", "elicitd_event_loop_blocked_seconds_bucket"):
        assert sample(name, le="+Inf") - sample(name, le="0.025") >= 1


# ---- logins beside parked long-polls ----------------------------------------------------------------
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# One TLS context for every client the test makes (all its URLs are plain http): building one per
# client is ~50 ms of CPU each, which would only compete with the server for the machine's cores.
_TLS = ssl.create_default_context()


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=30, verify=_TLS) as http:
        response = await http.get(f"{url}/metrics")
    assert response.status_code == 200
    return samples(response.text)


def ticks_over(found: Samples, metric: str, limit: str) -> float:
    """Ticks of ``metric`` above ``limit`` (a bucket bound, e.g. ``"0.01"``) since the process started."""
    name = f"{metric}_seconds_bucket"
    return found[(name, (("le", "+Inf"),))] - found[(name, (("le", limit),))]


@contextlib.contextmanager
def elicitd_process(settings: Settings, keys: str, log: Path) -> Iterator[tuple[str, int]]:
    """``elicitd serve`` on a free loopback port (uvloop and httptools, as in production): its URL
    and process id."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": settings.database_url,
            "ELICITD_REDIS_URL": settings.redis_url or "",
            "ELICITD_REDIS_CHANNEL": f"elicitd:stalls:{uuid.uuid4().hex[:8]}",
            "ELICITD_PUBLIC_URL": url,
            "ELICITD_KEYS": keys,
            "ELICITD_SIGNING_KEY": ReceiptSigner.generate_pem(),
            "ELICITD_MAX_WAIT_SECONDS": str(WAIT_SECONDS),
            "ELICITD_LOG_JSON": "true",
        }
    )
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            yield url, process.pid
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


async def sign_in(url: str, issuer: OAuthServer, flow_ref: str, sub: str, *, after: float = 0.0) -> float:
    """One person's login, as a browser makes it (cookies, redirects); returns its duration."""
    await asyncio.sleep(after)
    started = time.perf_counter()
    page = f"{url}/f/{flow_ref}"
    async with httpx.AsyncClient(timeout=60, verify=_TLS) as browser:
        opened = await browser.get(page)
        assert opened.status_code == 303
        assert opened.headers["location"].startswith(issuer.authorization_endpoint)
        login_page = await browser.get(opened.headers["location"])
        assert login_page.status_code == 200
        request_id = re.search(r'name="request_id" value="([^"]+)"', login_page.text)
        assert request_id is not None
        approved = await browser.post(
            issuer.url("/login"), data={"request_id": request_id.group(1), "username": sub, "action": "approve"}
        )
        assert approved.status_code == 303
        back = await browser.get(approved.headers["location"])
        assert back.status_code == 303
        assert back.headers["location"] == f"/f/{flow_ref}"
        shown = await browser.get(page)
        assert shown.status_code == 200
        assert 'action="/consent/' in shown.text  # the consent page itself, for its subject
    return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settled(pid: int, *, window: float = 0.5, busy: float = 0.05, timeout: float = 60) -> None:
    """Until process ``pid`` used under ``busy`` of one core over ``window`` seconds: the parking
    itself (1,000 first reads, the objects they made and the collections they set off) is over."""
    deadline = time.monotonic() + timeout
    used = cpu_seconds(pid)
    while True:
        await asyncio.sleep(window)
        now = cpu_seconds(pid)
        if now - used < busy * window:
            return
        used = now
        assert time.monotonic() < deadline, "elicitd stayed busy after the long-polls parked"


async def park_and_sign_in(
    url: str,
    pid: int,
    issuer: OAuthServer,
    api_key: str,
    parked: list[str],
    subjects: list[tuple[str, str]],
    logins: list[str],
) -> None:
    limits = httpx.Limits(max_connections=PARKED + 50, max_keepalive_connections=PARKED + 50)
    auth = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(
        base_url=url, headers=auth, limits=limits, timeout=WAIT_SECONDS + 30, verify=_TLS
    ) as api:
        # The first login pays the one-time costs (issuer discovery, keys, templates): not measured.
        await sign_in(url, issuer, *subjects[0])

        polls = [
            asyncio.create_task(api.get(f"/v1/flows/{ref}", params={"wait_seconds": WAIT_SECONDS})) for ref in parked
        ]
        try:
            deadline = time.monotonic() + 60
            while (await scrape(url))[("elicitd_waiters", ())] < PARKED:
                assert time.monotonic() < deadline, "the long-polls did not all park"
                await asyncio.sleep(0.2)
            # Registered is not yet parked: each still reads its flow once. The measurement is of
            # logins beside parked long-polls, so it starts once that work is done.
            await settled(pid)
            before = await scrape(url)  # starts a new period of the max gauge
            durations = await asyncio.gather(
                *(
                    sign_in(url, issuer, ref, sub, after=index * STAGGER_SECONDS)
                    for index, (ref, sub) in enumerate(subjects[1:])
                )
            )
            after = await scrape(url)
            assert not any(poll.done() for poll in polls), "a long-poll returned during the logins"
        finally:
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)

    stall = after[("elicitd_event_loop_stall_max_seconds", ())]
    blocked = after[("elicitd_event_loop_blocked_max_seconds", ())]
    over = ticks_over(after, "elicitd_event_loop_blocked", STALL_LIMIT_BUCKET) - ticks_over(
        before, "elicitd_event_loop_blocked", STALL_LIMIT_BUCKET
    )
    busy = ticks_over(after, "elicitd_event_loop_blocked", "0.01") - ticks_over(
        before, "elicitd_event_loop_blocked", "0.01"
    )
    logins.append(
        f"{len(durations)} logins beside {PARKED} parked long-polls: the loop was blocked at most "
        f"{blocked * 1000:.1f} ms ({busy:.0f} ticks blocked over 10 ms, {over:.0f} over {STALL_LIMIT_SECONDS * 1000:.0f} ms); the longest stall including time the "
        f"host did not run the process was {stall * 1000:.1f} ms; logins took {min(durations):.2f}-{max(durations):.2f} s"
    )
    assert after[("elicitd_waiters", ())] == PARKED
    assert blocked < STALL_LIMIT_SECONDS, logins[-1]
    assert over == 0, logins[-1]


async def insert_flow(session: AsyncSession, client_id: uuid.UUID, iss: str, kind: str, sub: str | None = None) -> str:
    """A pending flow, written straight to the database (creating 1,021 through the API is not
    what this test is about)."""
    external = kind == "external"
    flow = await flow_repo.FlowStatements.insert_pending(
        session,
        {
            "id": uuid7(),
            "server_client_id": client_id,
            "subject_iss": iss,
            "subject_sub": sub or f"parked-{uuid.uuid4().hex[:8]}",
            "kind": kind,
            "reuse_key": uuid.uuid4().hex,
            "provider": None,
            "scopes": [],
            "params": {} if external else {"title": "Share your calendar", "description": "Read-only, for a week."},
            "context": {},
            "message": "parked" if external else "sign in",
            "external_url": "http://127.0.0.1:9/step" if external else None,
            "connection_id": None,
            "ttl_seconds": 900,
        },
    )
    assert flow is not None
    return FLOW_ID.format(flow.id)


@pytest.mark.slow
async def test_logins_beside_a_thousand_parked_long_polls_never_stall_the_loop(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings()
    keys = KeyRing.generate_entry("st1")
    with OAuthServer() as issuer, elicitd_process(settings, keys, tmp_path / "elicitd.log") as (url, pid):
        engine = make_engine(settings)
        try:
            sessions = make_sessionmaker(engine)
            async with unit_of_work(sessions) as session:
                config = IssuerConfig(issuer=issuer.issuer, client_id="elicitd-test", display_name="Test ID")
                await upsert_issuer(session, Vault(KeyRing.parse(keys, name="test keys")), config)
                client = await create_server_client(session, f"stalls-{uuid.uuid4().hex[:8]}")
            parked: list[str] = []
            subjects: list[tuple[str, str]] = []
            async with unit_of_work(sessions) as session:
                for _ in range(PARKED):
                    parked.append(await insert_flow(session, client.client.id, "https://id.example.com", "external"))
                for _ in range(LOGINS + 1):
                    sub = f"stall-{uuid.uuid4().hex[:10]}"
                    subjects.append((await insert_flow(session, client.client.id, issuer.issuer, "consent", sub), sub))
        finally:
            await engine.dispose()
        report: list[str] = []
        try:
            await park_and_sign_in(url, pid, issuer, client.api_key, parked, subjects, report)
        finally:
            print("\n".join(report))
