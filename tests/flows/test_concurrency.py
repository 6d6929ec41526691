"""Exactly one terminal transition, however many completers race."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from sqlalchemy import text

from service.flows.repository import SWEEP_LOCK_KEY, Transition
from service.flows.schemas import Subject
from service.flows.states import Actor, FlowStatus
from service.flows.sweeper import drain
from service.settings import Settings
from tests.flows.helpers import create_external, db_events, force_expiry
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app


async def test_fifty_concurrent_completers_one_transition(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        for round_no in range(15):
            created = await create_external(http, Subject(iss=subject.iss, sub=f"{subject.sub}-{round_no}"))
            flow_id = created["flow"]["id"]
            calls = [
                http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"by": i}})
                if i % 2 == 0
                else http.post(f"/v1/flows/{flow_id}/fail", json={"code": f"c{i}"})
                for i in range(50)
            ]
            responses = await asyncio.gather(*calls)
            codes = sorted(r.status_code for r in responses)
            assert codes == [200] + [409] * 49, codes
            winner = next(r for r in responses if r.status_code == 200).json()["flow"]
            transitions = [e for e in await db_events(elicitd, flow_id) if e["type"] == "transition"]
            assert len(transitions) == 1
            assert transitions[0]["to_status"] == winner["status"]


async def test_concurrent_service_level_transitions(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    """Completion, decline, cancel and expiry racing inside the service: one winner."""
    flows = elicitd.state.flows
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
    flow_id = uuid.UUID(hex=created["flow"]["id"].removeprefix("fl_"))
    changes = [
        Transition(FlowStatus.COMPLETED, Actor.API, result={"n": 1}),
        Transition(FlowStatus.DECLINED, Actor.MCP_CLIENT),
        Transition(FlowStatus.CANCELLED, Actor.ADMIN),
        Transition(FlowStatus.FAILED, Actor.PROVIDER, error_code="x"),
    ] * 10
    results = await asyncio.gather(*(flows.finish(flow_id, c) for c in changes))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    transitions = [e for e in await db_events(elicitd, created["flow"]["id"]) if e["type"] == "transition"]
    assert len(transitions) == 1


async def test_two_sweepers_expire_each_flow_once(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    flows = elicitd.state.flows
    ids = []
    async with elicitd.http(server_client.api_key) as http:
        for i in range(30):
            created = await create_external(http, Subject(iss=subject.iss, sub=f"{subject.sub}-s{i}"))
            ids.append(created["flow"]["id"])
            await force_expiry(elicitd, created["flow"]["id"])
    await asyncio.gather(*(flows.sweep_once() for _ in range(6)))
    async with elicitd.state.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT flow_id, count(*) FROM flow_events WHERE type = 'transition' AND flow_id = ANY(:ids) "
                    "GROUP BY flow_id"
                ),
                {"ids": [uuid.UUID(hex=i.removeprefix("fl_")) for i in ids]},
            )
        ).all()
        statuses = (
            (
                await session.execute(
                    text("SELECT DISTINCT status FROM flows WHERE id = ANY(:ids)"),
                    {"ids": [uuid.UUID(hex=i.removeprefix("fl_")) for i in ids]},
                )
            )
            .scalars()
            .all()
        )
    assert len(rows) == 30
    assert all(count == 1 for _, count in rows)
    assert statuses == ["expired"]


async def test_a_drain_rests_after_each_full_batch_for_as_long_as_the_batch_took(
    make_settings: Callable[..., Settings], backend: backends.Backends, subject: Subject
) -> None:
    """Seven due flows, batches of three: three statements, two rests (none after the short last
    batch), each rest twice as long as the batch before it (``SWEEP_SHARE`` 1/3), every flow expired
    once. On a database of its own: the suite's shared instance sweeps the shared one every 0.5 s
    and would take a batch of these."""
    async with backends.migrated_database(backend.server_url) as url:
        await _drain_in(make_settings(database_url=url, background_tasks=False, sweep_batch_size=3), subject)


async def _due_flows(app: RunningApp, subject: Subject, count: int) -> list[str]:
    """``count`` external flows of a new server client, each past its expiry; their ids."""
    client = await new_server_client(app)
    ids = []
    async with app.http(client.api_key) as http:
        for i in range(count):
            created = await create_external(http, Subject(iss=subject.iss, sub=f"{subject.sub}-d{i}"))
            ids.append(created["flow"]["id"])
            await force_expiry(app, created["flow"]["id"])
    return ids


async def _drain_in(settings: Settings, subject: Subject) -> None:
    async with running_app(settings) as app:
        flows = app.state.flows
        ids = await _due_flows(app, subject, 7)
        batches: list[float] = []
        rests: list[float] = []
        sweep_once = flows.sweep_once

        async def timed_sweep() -> int:
            started = time.perf_counter()
            try:
                return await sweep_once()
            finally:
                batches.append(time.perf_counter() - started)

        async def rest(seconds: float) -> None:
            rests.append(seconds)

        flows.sweep_once = timed_sweep  # type: ignore[method-assign]
        assert await drain(flows, rest=rest) == 7
        assert len(batches) == 3
        assert len(rests) == 2
        for took, rested in zip(batches, rests, strict=False):
            # The rest is twice the batch's own time, as the drain measured it around the call.
            assert took * 1.9 <= rested <= took * 2.1 + 0.004
        events = [e for i in ids for e in await db_events(app, i) if e["type"] == "transition"]
        assert sorted(e["to_status"] for e in events) == ["expired"] * 7


async def test_one_sweep_batch_at_a_time_in_the_fleet(
    make_settings: Callable[..., Settings], backend: backends.Backends, subject: Subject
) -> None:
    """While another replica's batch holds the sweep's gate, a sweep expires nothing (and does not
    wait for it); once that batch has committed, the next sweep expires every due flow. On a
    database of its own, so no other instance's sweeper takes the flows."""
    async with backends.migrated_database(backend.server_url) as url:
        settings = make_settings(database_url=url, background_tasks=False)
        async with running_app(settings) as app:
            ids = await _due_flows(app, subject, 4)
            flows = app.state.flows
            async with app.state.sessions() as other, other.begin():  # the other replica's batch
                held = await other.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": SWEEP_LOCK_KEY})
                assert held.scalar_one() is True
                started = time.perf_counter()
                assert await flows.sweep_once() == 0
                assert time.perf_counter() - started < 1.0  # refused at once, not queued behind it
                assert await drain(flows) == 0
            assert await flows.sweep_once() == 4
            assert await flows.sweep_once() == 0
            events = [e for i in ids for e in await db_events(app, i) if e["type"] == "transition"]
            assert sorted(e["to_status"] for e in events) == ["expired"] * 4
