"""A replica killed with SIGKILL under load: the surviving replica never answers an error, the dead
one's callers see no HTTP answer at all (a load balancer's cue to send them elsewhere), and every
write either replica acknowledged is in PostgreSQL and readable through the survivor."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from service.admin.tokens import Role, create_token, parse_lifetime
from service.identity.clients import create_server_client
from service.settings import Settings
from tests.faults.conftest import replica_env
from tests.faults.load import Answer, FlowWorkload, lost_writes, make_flows, open_loop, record, statuses
from tests.support.faults import replica

RATE = 50
BEFORE, AFTER = 3.0, 4.0
LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=2.0)

pytestmark = pytest.mark.slow


async def test_a_replica_killed_under_load_loses_nothing_acknowledged(
    make_fault_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_fault_settings()
    engine = create_async_engine(settings.database_url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        async with sessions() as session:
            client = await create_server_client(session, "faults-replicas", subject_proof="none")
            token = await create_token(session, name="faults", role=Role.parse("viewer"), lifetime=parse_lifetime("1h"))
            await session.commit()
        env = replica_env(settings)
        with replica(env, tmp_path / "r1.log") as r1, replica(env, tmp_path / "r2.log") as r2:
            bearer = {"Authorization": f"Bearer {client.api_key}"}
            admin = {"Authorization": f"Bearer {token.secret}"}
            async with (
                httpx.AsyncClient(base_url=r1.url, headers=bearer, limits=LIMITS, timeout=60) as api1,
                httpx.AsyncClient(base_url=r2.url, headers=bearer, limits=LIMITS, timeout=60) as api2,
                httpx.AsyncClient(base_url=r1.url, headers=admin, limits=LIMITS, timeout=60) as admin1,
                httpx.AsyncClient(base_url=r2.url, headers=admin, limits=LIMITS, timeout=60) as admin2,
                httpx.AsyncClient(base_url=r1.url, limits=LIMITS, timeout=60) as pages1,
                httpx.AsyncClient(base_url=r2.url, limits=LIMITS, timeout=60) as pages2,
            ):
                per_replica = math.ceil(RATE * (BEFORE + AFTER) / 10) + 5
                reads = await make_flows(api1, 10, "replica-reads")
                survivor = FlowWorkload(
                    api=api1,
                    admin=admin1,
                    pages=pages1,
                    pending=await make_flows(api1, per_replica, "replica-1"),
                    reads=reads,
                    name="r1",
                )
                doomed = FlowWorkload(
                    api=api2,
                    admin=admin2,
                    pages=pages2,
                    pending=await make_flows(api2, per_replica, "replica-2"),
                    reads=reads,
                    name="r2",
                )

                async def spread(i: int) -> Answer:
                    return await (survivor if i % 2 == 0 else doomed)(i // 2)

                loop = asyncio.get_running_loop()
                load = asyncio.create_task(open_loop(RATE, BEFORE + AFTER, spread))
                await asyncio.sleep(BEFORE)
                killed = loop.time()
                r2.kill()
                answers = list(await load)
                # Every acknowledged completion, read back through the survivor.
                acknowledged = [a.flow for a in answers if a.op == "complete" and a.ok and a.flow]
                # In batches below the survivor's admission bound (ELICITD_MAX_IN_FLIGHT, 64):
                # more reads at once than that are refused 503 overloaded, by design.
                read_back = []
                for start in range(0, len(acknowledged), 32):
                    batch = acknowledged[start : start + 32]
                    read_back += await asyncio.gather(*(api1.get(f"/v1/flows/{flow}") for flow in batch))
                survivor_ready = (await api1.get("/readyz")).json()
        lost = await lost_writes(sessions, answers)
    finally:
        await engine.dispose()

    from_r1 = [a for a in answers if a.target == "r1"]
    from_r2 = [a for a in answers if a.target == "r2"]
    r2_before = [a for a in from_r2 if a.sent + a.seconds < killed]
    r2_after = [a for a in from_r2 if a.sent >= killed]
    record(
        "replica killed (SIGKILL) under load",
        {
            "rate": RATE,
            "answers": len(answers),
            "survivor": statuses(from_r1),
            "killed_before": statuses(r2_before),
            "killed_in_flight_or_after": statuses([a for a in from_r2 if a not in r2_before]),
            "acknowledged_completions": len(acknowledged),
            "lost": len(lost),
        },
    )
    assert [a for a in from_r1 if not a.ok] == []
    assert [a for a in r2_before if not a.ok] == []
    # After the kill, no HTTP answer at all: nothing half-answered, no error status.
    assert {a.status for a in r2_after} == {0}
    assert all(a.status in (0, 200, 201) for a in from_r2)
    assert lost == []
    assert [r.json()["flow"]["status"] for r in read_back] == ["completed"] * len(acknowledged)
    assert survivor_ready["status"] == "ready"
    assert survivor_ready["wakeups"] == "redis"
