"""PostgreSQL going away under load: every request answers what it would have answered, or a
well-formed ``503`` + ``Retry-After`` (never a 500); the pool recovers by itself within a second
of the server's return; nothing acknowledged is lost.

The outage lasts ``ELICITD_FAULT_OUTAGE_SECONDS`` (5 s by default, to keep the suite quick; the
figures in docs/operating.md come from a 20 s run of the same test).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from service.flows.schemas import Subject
from service.settings import Settings
from tests.faults.conftest import admin_token
from tests.faults.load import (
    Answer,
    FlowWorkload,
    lost_writes,
    make_flows,
    open_loop,
    percentile,
    record,
    statuses,
    unexpected,
)
from tests.flows.helpers import create_external, resolve_body
from tests.support.apps import RunningApp, new_server_client, running_app
from tests.support.faults import PrivatePostgres, TcpProxy
from tests.support.waiting import parked

RATE = 50  # requests per second
OUTAGE_SECONDS = float(os.environ.get("ELICITD_FAULT_OUTAGE_SECONDS", "5"))
# Idle connections are let go before uvicorn closes them (5 s), so no request races a closing socket.
LIMITS = httpx.Limits(max_connections=2000, max_keepalive_connections=200, keepalive_expiry=2.0)

pytestmark = pytest.mark.slow


class ErrorRecords(logging.Handler):
    """What ``elicitd.errors`` logged: a 500 logs ``unhandled error`` with the exception's type."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.unhandled: list[str] = []
        self.unavailable: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "unhandled error" and record.exc_info and record.exc_info[1]:
            exc: BaseException | None = record.exc_info[1]
            chain = []
            while exc is not None:
                # Where it was raised in elicitd's code: enough to find the path without a stack.
                ours = [f for f in traceback.extract_tb(exc.__traceback__) if "/service/" in f.filename]
                where = f" at {ours[-1].filename.rsplit('/service/', 1)[1]}:{ours[-1].lineno}" if ours else ""
                chain.append(f"{type(exc).__name__}: {str(exc)[:120]}{where}")
                exc = exc.__cause__ or exc.__context__
            self.unhandled.append(" <- ".join(chain))
        if record.getMessage() == "database unavailable":
            reason = str(getattr(record, "reason", "?"))
            self.unavailable[reason] = self.unavailable.get(reason, 0) + 1


@contextmanager
def error_records() -> Iterator[ErrorRecords]:
    handler = ErrorRecords()
    logger = logging.getLogger("elicitd.errors")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@dataclass
class Outcome:
    answers: list[Answer]
    fault_start: float
    fault_end: float
    lost: list[str]
    errors: ErrorRecords
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[Answer]:
        return [a for a in self.answers if not a.ok]

    def figures(self) -> dict[str, Any]:
        failed = self.failed
        back = self.fault_end
        first_ok = min((a.sent + a.seconds for a in self.answers if a.sent >= back and a.ok), default=math.inf)
        last_failure = max((a.sent for a in failed), default=-math.inf)
        return {
            "rate": RATE,
            "fault_s": round(back - self.fault_start, 2),
            "answers": len(self.answers),
            "statuses": statuses(self.answers),
            "failures_with_retry_after": sum(1 for a in failed if a.retry_after),
            "first_ok_after_fault_ms": round((first_ok - back) * 1000),
            "last_failed_request_sent_after_fault_ms": round((last_failure - back) * 1000) if failed else None,
            "p99_answer_ms_during_fault": round(
                percentile([a.seconds for a in self.answers if self.fault_start <= a.sent < back], 0.99) * 1000
            ),
            "unavailable_reasons": self.errors.unavailable,
            "lost": len(self.lost),
            "unhandled": self.errors.unhandled,
            **self.extra,
        }

    def assert_well_behaved(self, *, recovered_within: float = 1.0) -> None:
        assert self.errors.unhandled == []
        assert unexpected(self.answers) == []
        assert [a for a in self.answers if a.sent + a.seconds < self.fault_start and not a.ok] == []
        late = [a for a in self.answers if a.sent >= self.fault_end + recovered_within and not a.ok]
        assert late == [], [(a.op, a.status, round(a.sent - self.fault_end, 3)) for a in late]
        assert self.lost == []


@asynccontextmanager
async def loaded(settings: Settings, seconds: float) -> AsyncIterator[tuple[RunningApp, FlowWorkload]]:
    """An instance, a server client, an admin token and enough pending flows for ``seconds`` of load."""
    async with running_app(settings) as app:
        client = await new_server_client(app, subject_proof="none")
        token = await admin_token(app)
        async with (
            app.http(client.api_key, limits=LIMITS) as api,
            app.http(token, limits=LIMITS) as admin,
            app.http(limits=LIMITS) as pages,
        ):
            pending = await make_flows(api, math.ceil(RATE * seconds / 5) + 5, f"p{id(app)}")
            reads = await make_flows(api, 10, f"r{id(app)}")
            yield app, FlowWorkload(api=api, admin=admin, pages=pages, pending=pending, reads=reads)


async def under_load(
    settings: Settings,
    fault: Callable[[], Awaitable[None]],
    *,
    before: float = 3.0,
    fault_seconds: float,
    after: float = 4.0,
) -> Outcome:
    """Load for ``before`` seconds, then ``fault()`` (which returns when the dependency is back),
    then load for ``after`` more seconds; ``fault_seconds`` sizes the load to cover the fault."""
    total = before + fault_seconds + after
    with error_records() as errors:
        async with loaded(settings, total) as (app, workload):
            loop = asyncio.get_running_loop()
            load = asyncio.create_task(open_loop(RATE, total, workload))
            await asyncio.sleep(before)
            start = loop.time()
            await fault()
            end = loop.time()
            answers = await load
            lost = await lost_writes(app.state.sessions, answers)
    return Outcome(answers, start, end, lost, errors)


async def test_postgres_stopped_under_load_answers_503_then_recovers_within_a_second(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    async def outage() -> None:
        await asyncio.to_thread(postgres.stop, "fast")
        await asyncio.sleep(OUTAGE_SECONDS)
        await asyncio.to_thread(postgres.start)

    try:
        outcome = await under_load(make_fault_settings(), outage, fault_seconds=OUTAGE_SECONDS)
    finally:
        if not postgres.running():
            postgres.start()
    record("postgres stopped under load", outcome.figures())
    outcome.assert_well_behaved()
    assert outcome.failed != []  # the outage was seen


async def test_postgres_fast_restart_under_load_answers_503_never_500(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    async def restart() -> None:
        await asyncio.to_thread(postgres.restart, "fast")

    outcome = await under_load(make_fault_settings(), restart, fault_seconds=1.0)
    record("postgres restarted (-m fast) under load", outcome.figures())
    outcome.assert_well_behaved()


async def test_postgres_crash_under_load_answers_503_and_loses_nothing_acknowledged(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    """``-m immediate`` is a crash: no checkpoint, every backend killed, WAL replayed at start."""

    async def crash() -> None:
        await asyncio.to_thread(postgres.stop, "immediate")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(postgres.start)

    try:
        outcome = await under_load(make_fault_settings(), crash, fault_seconds=2.0)
    finally:
        if not postgres.running():
            postgres.start()
    record("postgres crashed (-m immediate) under load", outcome.figures())
    outcome.assert_well_behaved()


async def test_postgres_paused_briefly_only_slows_requests_down(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    """A 3 s SIGSTOP is shorter than every timeout: requests wait and then succeed. The only
    refusals are the admission bound's (``ELICITD_MAX_IN_FLIGHT``): once that many wait on the
    paused database, the next is answered ``503 overloaded`` with ``Retry-After`` at once, without
    waiting for PostgreSQL — nothing times out and nothing is lost.

    (How fast the backlog drains afterwards is the machine's business, not the fault's: the
    figures record it.)"""
    pause = 3.0

    async def paused() -> None:
        postgres.pause()
        try:
            await asyncio.sleep(pause)
        finally:
            postgres.resume()

    outcome = await under_load(make_fault_settings(), paused, fault_seconds=pause)
    record("postgres paused 3 s under load", outcome.figures())
    assert outcome.errors.unhandled == []
    refused = [(a.status, a.retry_after, json.loads(a.body).get("code"), a.seconds < 0.5) for a in outcome.failed]
    assert refused == [(503, "1", "overloaded", True)] * len(outcome.failed)
    assert outcome.lost == []


async def test_postgres_paused_past_the_pool_timeout_answers_503_then_recovers(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    """Paused 8 s with a 2 s pool timeout: requests that found no connection answer 503 after 2 s,
    a new connection that gets no answer gives up after the connect timeout (503), and the
    requests that held a connection finish once the server runs again."""
    pause = 8.0

    async def paused() -> None:
        postgres.pause()
        try:
            await asyncio.sleep(pause)
        finally:
            postgres.resume()

    outcome = await under_load(make_fault_settings(db_pool_timeout_seconds=2.0), paused, fault_seconds=pause)
    record("postgres paused 8 s under load, pool timeout 2 s", outcome.figures())
    # The requests queued during the pause are served once it ends; the backlog drains at the
    # machine's pace, so recovery is judged 5 s after the end rather than 1 s.
    outcome.assert_well_behaved(recovered_within=5.0)
    assert outcome.failed != []
    # No failure waits for the pause to end: the pool timeout (2 s) or the connect timeout (5 s)
    # answers first (the 95th percentile leaves room for a busy machine's stalls).
    assert percentile([a.seconds for a in outcome.failed], 0.95) < 5.0


async def test_connections_reset_under_load_answer_503_and_the_pool_reconnects(
    postgres: PrivatePostgres, fault_database: str, make_fault_settings: Callable[..., Settings]
) -> None:
    """A TCP proxy resets every connection between elicitd and PostgreSQL three times, 0.5 s apart,
    as a failover or a firewall would: the requests in flight answer 503, the next ones reconnect."""
    proxy = TcpProxy("127.0.0.1", postgres.port).start()
    try:
        url = make_url(fault_database).set(port=proxy.port).render_as_string(hide_password=False)

        async def resets() -> None:
            for _ in range(3):
                proxy.drop()
                await asyncio.sleep(0.5)

        outcome = await under_load(make_fault_settings(database_url=url), resets, fault_seconds=1.5)
    finally:
        proxy.stop()
    record("postgres connections reset (3x) under load", outcome.figures())
    outcome.assert_well_behaved()


async def test_a_read_only_primary_answers_503_until_the_pool_reaches_a_writable_one(
    postgres: PrivatePostgres, fault_database: str, make_fault_settings: Callable[..., Settings]
) -> None:
    """A failover demotes the server every pooled connection is on: writes fail with 25006.
    The pool must let those connections go, or writes would keep failing until they are recycled
    minutes later. Here the old sessions stay read-only for good, while new sessions are
    writable (as connections made to the new primary would be)."""
    database = make_url(fault_database).database
    admin = await asyncpg.connect(postgres.url())
    await admin.execute("SET default_transaction_read_only = off")
    read_only = 2.0

    async def failover() -> None:
        await admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        await admin.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(read_only)
        # New sessions of this database are writable (the new primary); old ones keep the
        # read-only default the reload gave them.
        await admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = off')

    try:
        outcome = await under_load(make_fault_settings(), failover, fault_seconds=read_only)
    finally:
        await admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
        await admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        await admin.execute("SELECT pg_reload_conf()")
        await admin.close()
    record("postgres primary turned read-only under load", outcome.figures())
    outcome.assert_well_behaved()
    assert outcome.errors.unavailable.get("read_only_transaction", 0) > 0


async def test_long_polls_parked_when_postgres_stops_answer_503_at_the_end_of_their_wait(
    postgres: PrivatePostgres, make_fault_settings: Callable[..., Settings]
) -> None:
    """A status long-poll and a resolve with ``accept``, both parked past their one read, when
    PostgreSQL stops: the read that ends their wait fails, and each answers ``503 unavailable``
    with ``Retry-After`` (answered after Litestar has returned, ``service.observability.requests``),
    never a 500; both waiters are released."""
    subject = Subject(iss="https://id.example.com", sub="parked-outage")
    try:
        async with running_app(make_fault_settings()) as app:
            client = await new_server_client(app)
            async with app.http(client.api_key) as http:
                polled = await create_external(http, subject)
                resolved = await create_external(http, Subject(iss=subject.iss, sub="parked-outage-2"))
                waits = [
                    asyncio.create_task(http.get(f"/v1/flows/{polled['flow']['id']}", params={"wait_seconds": 3})),
                    asyncio.create_task(
                        http.post(
                            "/v1/flows/resolve",
                            json=resolve_body(resolved, Subject(iss=subject.iss, sub="parked-outage-2"), wait=3),
                        )
                    ),
                ]
                for created in (polled, resolved):
                    await parked(app, created["flow"]["id"])
                await asyncio.sleep(0.3)  # past their one read: both wait
                await asyncio.to_thread(postgres.stop, "fast")
                answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
            assert app.services.hub.waiter_count == 0
    finally:
        if not postgres.running():
            postgres.start()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["code"] == "unavailable"
