"""The admin flow list stays an index scan on a deep, filtered page.

20 000 flows are inserted by one ``INSERT … SELECT generate_series`` and the table is analyzed, so
the planner weighs a real table rather than an empty one; then the exact statement the admin API
issues (``service.admin.flows.list_statement``, compiled with its values) is explained for each
filter, with a cursor in the middle of the rows. The planner is left to its own choice (no
``enable_seqscan = off``): a plan that reads the whole table appears as a Seq Scan on ``flows``.
An index scan can still be slow (walking the primary key backwards past thousands of rows the
filter rejects), so the plan is also run (``EXPLAIN ANALYZE``) and the rows it touched are
bounded: a page costs what its filter's selectivity says, not what its depth says.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from service.admin.flows import FlowFilters, list_statement
from service.db.pagination import encode_cursor
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client

ROWS = 20_000
# Rows a 51-row page may touch in this data set: the rarest filter matches 1 row in 25.
MAX_TOUCHED = 2_000

_BULK = text(f"""
INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, provider, reuse_key, message, status,
                   expires_at, created_at, completed_at)
SELECT (lpad(to_hex(base.ms + g), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8'
        || substr(md5(g::text), 4, 15))::uuid,
       :client,
       (ARRAY['oauth_connect', 'api_key', 'consent', 'payment', 'external'])[1 + g % 5],
       'https://bulk.example.com', 'bulk-' || (g % 1000), 'prov-' || (g % 20), md5(g::text), 'bulk',
       (ARRAY['completed', 'declined', 'cancelled', 'expired', 'failed'])[1 + (g / 5) % 5],
       base.now + make_interval(secs => g), base.now - make_interval(secs => {ROWS} - g),
       base.now - make_interval(secs => {ROWS} - g) + interval '30 seconds'
FROM generate_series(1, {ROWS}) AS g,
     (SELECT now() AS now, (extract(epoch FROM now()) * 1000)::bigint - 3600000 AS ms) AS base
""")


@pytest.fixture(scope="module")
async def bulk(elicitd: RunningApp) -> AsyncIterator[ServerClientHandle]:
    client = await new_server_client(elicitd)
    async with elicitd.state.sessions() as session:
        await session.execute(_BULK, {"client": client.id})
        await session.commit()
    async with elicitd.state.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql("ANALYZE flows")
    try:
        yield client
    finally:
        async with elicitd.state.sessions() as session:
            await session.execute(text("DELETE FROM flows WHERE server_client_id = :c"), {"c": client.id})
            await session.commit()


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


async def explain(
    app: RunningApp, filters: FlowFilters, cursor: str, limit: int = 50
) -> tuple[list[dict[str, Any]], int]:
    """The executed plan's nodes and the page's row count, for the statement the admin list runs."""
    stmt = list_statement(filters, cursor=cursor, limit=limit)
    async with app.state.sessions() as session:
        conn = await session.connection()
        sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        raw = (await conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)).scalar_one()
        rows = len((await session.execute(stmt)).all())
    document = json.loads(raw) if isinstance(raw, str) else raw
    return list(nodes(document[0]["Plan"])), rows


async def test_deep_filtered_pages_use_an_index(elicitd: RunningApp, bulk: ServerClientHandle) -> None:
    async with elicitd.state.sessions() as session:
        middle, created_middle = (
            await session.execute(
                text("SELECT id, created_at FROM flows WHERE server_client_id = :c ORDER BY id OFFSET :n LIMIT 1"),
                {"c": bulk.id, "n": ROWS // 2},
            )
        ).one()
        seqscan = (await session.execute(text("SHOW enable_seqscan"))).scalar_one()
    assert seqscan == "on"
    cursor = encode_cursor(middle)
    cases = {
        "none": FlowFilters(),
        "server_client": FlowFilters(server_client=bulk.public_id),
        "status": FlowFilters(status="declined"),
        "kind": FlowFilters(kind="consent"),
        "provider": FlowFilters(provider="prov-7"),
        "subject": FlowFilters(subject_iss="https://bulk.example.com", subject_sub="bulk-42"),
        "created": FlowFilters(
            created_after=created_middle - timedelta(hours=2), created_before=created_middle + timedelta(minutes=30)
        ),
        "expires": FlowFilters(
            expires_after=created_middle + timedelta(minutes=10), expires_before=created_middle + timedelta(hours=3)
        ),
        "combined": FlowFilters(server_client=bulk.public_id, status="expired", kind="payment"),
    }
    plans = {}
    for name, filters in cases.items():
        plan, rows = await explain(elicitd, filters, cursor)
        plans[name] = plan
        scans = [(n["Node Type"], n.get("Index Name")) for n in plan if n.get("Relation Name") == "flows"]
        assert ("Seq Scan", None) not in scans, (name, scans)
        assert scans and all(kind in {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"} for kind, _ in scans), (
            name,
            scans,
        )
        touched = sum(
            n["Actual Rows"] + n.get("Rows Removed by Filter", 0) + n.get("Rows Removed by Index Recheck", 0)
            for n in plan
            if n.get("Relation Name") == "flows"
        )
        assert touched <= MAX_TOUCHED, (name, scans, touched)
        if name != "subject":  # 20 subjects' worth of rows lie below the cursor, the others are all deep
            assert rows == 51, (name, rows)
    assert uuid.UUID(str(middle))  # the cursor is a real row of the bulk set
