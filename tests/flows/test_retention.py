"""Retention clears results and deletes old rows past their windows, and nothing else.

Ages are set with SQL relative to the database clock, so nothing here sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from service.errors import ConfigurationError
from service.flows.retention import run_retention
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle

_FLOW = text(
    "INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, reuse_key, message, status,"
    " result, expires_at, created_at, completed_at) VALUES (:id, :client, :kind, 'https://i', 'u', :reuse,"
    " 'm', :status, CAST(:result AS jsonb), now() + interval '1 hour',"
    " now() - make_interval(days => :age), CASE WHEN :ended THEN now() - make_interval(days => :age) END)"
)


async def _flow(
    app: RunningApp, client: ServerClientHandle, *, age: int, status: str = "completed", kind: str = "external"
) -> uuid.UUID:
    flow_id = uuid.uuid4()
    result = None if status == "pending" else '{"secret": "payload"}'
    async with app.state.sessions() as session:
        await session.execute(
            _FLOW,
            {
                "id": flow_id,
                "client": client.id,
                "kind": kind,
                "reuse": flow_id.hex,
                "status": status,
                "result": result,
                "age": age,
                "ended": status != "pending",
            },
        )
        await session.execute(
            text("INSERT INTO flow_events (flow_id, at, type, actor) VALUES (:f, now(), 'created', 'api')"),
            {"f": flow_id},
        )
        await session.commit()
    return flow_id


async def _outbox(
    app: RunningApp, client: ServerClientHandle, flow_id: uuid.UUID, delivered_days_ago: int | None
) -> uuid.UUID:
    row_id = uuid.uuid4()
    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO webhook_outbox (id, server_client_id, flow_id, event_type, payload, delivered_at)"
                " VALUES (:id, :client, :flow, 'flow.completed', '{}'::jsonb,"
                " CASE WHEN CAST(:days AS int) IS NULL THEN NULL ELSE now() - make_interval(days => CAST(:days AS int)) END)"
            ),
            {"id": row_id, "client": client.id, "flow": flow_id, "days": delivered_days_ago},
        )
        await session.commit()
    return row_id


async def _scalar(app: RunningApp, sql: str, **params: Any) -> Any:
    async with app.state.sessions() as session:
        return (await session.execute(text(sql), params)).scalar()


async def test_each_window_takes_exactly_what_is_older_and_keeps_the_rest(
    elicitd: RunningApp, server_client: ServerClientHandle, make_settings: Callable[..., Settings]
) -> None:
    app, client = elicitd, server_client
    fresh = await _flow(app, client, age=6)
    stale_result = await _flow(app, client, age=8)
    old = await _flow(app, client, age=91)
    old_declined = await _flow(app, client, age=120, status="declined")
    # A pending flow is never touched, however old (the sweeper would expire it; retention must not).
    pending = await _flow(app, client, age=200, status="pending")
    # A flow whose webhook is not delivered yet keeps its row; so does one with a payment record.
    undelivered_flow = await _flow(app, client, age=100)
    undelivered = await _outbox(app, client, undelivered_flow, None)
    paid = await _flow(app, client, age=100, kind="payment")
    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO payments (flow_id, provider, amount, currency, description, idempotency_key, status)"
                " VALUES (:f, 'stripe', 500, 'usd', 'x', :k, 'paid')"
            ),
            {"f": paid, "k": paid.hex},
        )
        await session.execute(
            text(
                "INSERT INTO consent_receipts (id, flow_id, server_client_id, subject_iss, subject_sub,"
                " text_sha256, key_id, receipt) VALUES (:id, :f, :c, 'https://i', 'u', 'h', 'k', 'signed')"
            ),
            {"id": old.hex, "f": old, "c": client.id},
        )
        await session.commit()
    delivered_old = await _outbox(app, client, fresh, 8)
    delivered_new = await _outbox(app, client, fresh, 6)
    audit_old, audit_new = uuid.uuid4(), uuid.uuid4()
    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO admin_audit_log (id, at, actor, operation) VALUES"
                " (:old, now() - interval '366 days', 'cli', 'retention-test'),"
                " (:new, now() - interval '364 days', 'cli', 'retention-test')"
            ),
            {"old": audit_old, "new": audit_new},
        )
        await session.commit()

    # Small batches, so the passes loop; the budget is generous so a slow machine still drains.
    rests: list[float] = []

    async def rest(seconds: float) -> None:
        rests.append(seconds)

    done = await run_retention(app.state.sessions, make_settings(), batch=2, budget_seconds=120, rest=rest)

    assert set(done) == {"flow_results", "flows", "webhook_outbox", "webhook_attempts", "admin_audit_log"}
    # After every full batch (and only then) the step rests as long as that batch took.
    assert len(rests) == sum(count // 2 for count in done.values())
    assert rests
    assert all(0 < seconds < 60 for seconds in rests)
    mine = {
        row[0]: row[1]
        for row in (
            await _rows(app, "SELECT id, result IS NOT NULL FROM flows WHERE server_client_id = :c", c=client.id)
        )
    }
    assert mine == {fresh: True, stale_result: False, pending: False, undelivered_flow: False, paid: False}
    assert await _scalar(app, "SELECT status FROM flows WHERE id = :f", f=pending) == "pending"
    events = await _rows(
        app, "SELECT flow_id FROM flow_events WHERE flow_id = ANY(:ids)", ids=[old, old_declined, fresh]
    )
    assert [row[0] for row in events] == [fresh]
    outbox = await _rows(app, "SELECT id FROM webhook_outbox WHERE server_client_id = :c ORDER BY id", c=client.id)
    assert {row[0] for row in outbox} == {undelivered, delivered_new}
    assert delivered_old not in {row[0] for row in outbox}
    # Audit rows are links of one hash chain: only its oldest end goes. The shared database's chain
    # starts with this session's recent rows, so an old row linked after them stays (no hole); the
    # chain's own tests (tests/admin/test_audit_chain.py) show the old end going.
    audit = await _rows(app, "SELECT id FROM admin_audit_log WHERE operation = 'retention-test'")
    assert {row[0] for row in audit} == {audit_old, audit_new}
    assert await _scalar(app, "SELECT receipt FROM consent_receipts WHERE flow_id = :f", f=old) == "signed"
    assert await _scalar(app, "SELECT amount FROM payments WHERE flow_id = :f", f=paid) == 500


async def _rows(app: RunningApp, sql: str, **params: Any) -> list[Any]:
    async with app.state.sessions() as session:
        return list((await session.execute(text(sql), params)).all())


async def test_a_window_switched_off_keeps_its_rows(
    elicitd: RunningApp, server_client: ServerClientHandle, make_settings: Callable[..., Settings]
) -> None:
    old = await _flow(elicitd, server_client, age=400)
    settings = make_settings(result_retention_seconds=None, flow_retention_seconds=None)

    done = await run_retention(elicitd.state.sessions, settings, budget_seconds=120)

    assert "flows" not in done
    assert "flow_results" not in done
    assert await _scalar(elicitd, "SELECT result->>'secret' FROM flows WHERE id = :f", f=old) == "payload"


def test_retention_settings_read_durations_and_off() -> None:
    base = {"ELICITD_DATABASE_URL": "postgresql://x/y", "ELICITD_PUBLIC_URL": "https://e.example"}
    base["ELICITD_KEYS"] = "k1:" + "A" * 43
    defaults = Settings.from_env(base)
    assert (defaults.result_retention_seconds, defaults.flow_retention_seconds) == (7 * 86400, 90 * 86400)
    assert (defaults.outbox_retention_seconds, defaults.audit_retention_seconds) == (7 * 86400, 365 * 86400)
    read = Settings.from_env(
        base
        | {
            "ELICITD_RESULT_RETENTION": "12h",
            "ELICITD_FLOW_RETENTION": "30d",
            "ELICITD_OUTBOX_RETENTION": "3600",
            "ELICITD_AUDIT_RETENTION": "off",
        }
    )
    assert (read.result_retention_seconds, read.flow_retention_seconds) == (43200, 30 * 86400)
    assert (read.outbox_retention_seconds, read.audit_retention_seconds) == (3600, None)
    for bad in ("0", "-1d", "soon", "inf"):
        with pytest.raises(ConfigurationError, match="ELICITD_FLOW_RETENTION"):
            Settings.from_env(base | {"ELICITD_FLOW_RETENTION": bad})
