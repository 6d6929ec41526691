"""A burst that outruns a database pool is answered 503 + Retry-After, never a 500: the ORM
engine's pool (authentication, here, with its cache off) and the statement pool of the hot path
(``service.db.pool``: the status read itself)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from service.flows.schemas import Subject
from service.settings import Settings
from tests.flows.helpers import create_external
from tests.support.apps import new_server_client, running_app


@pytest.mark.parametrize("held", ["engine", "statements"])
async def test_full_pool_answers_503_with_retry_after_then_recovers(
    make_settings: Callable[..., Settings], subject: Subject, held: str
) -> None:
    # A pool of one connection; the background sweeper/dispatcher would compete for it.
    settings = make_settings(
        db_pool_size=1,
        db_statement_pool_size=1,
        db_pool_timeout_seconds=0.2,
        background_tasks=False,
        api_key_cache_seconds=0,
    )
    async with running_app(settings) as app:
        client = await new_server_client(app)
        async with app.http(client.api_key) as http:
            created = await create_external(http, subject)
            flow_id = created["flow"]["id"]
            async with contextlib.AsyncExitStack() as holding:
                # Check out every connection the pool may hand out, and keep them checked out.
                if held == "engine":
                    pool = app.state.engine.pool
                    assert isinstance(pool, QueuePool)
                    for _ in range(pool.size()):
                        session = await holding.enter_async_context(app.state.sessions())
                        await session.execute(text("SELECT 1"))
                else:
                    statements = app.state.direct.pool
                    for _ in range(statements.size):
                        pooled = await statements.acquire()
                        holding.callback(statements.release, pooled)
                    assert statements.checked_out() == statements.size == 1
                busy = await http.get(f"/v1/flows/{flow_id}")
            after = await http.get(f"/v1/flows/{flow_id}")
    assert busy.status_code == 503, busy.text
    assert busy.headers["retry-after"] == "1"
    assert busy.headers["content-type"].startswith("application/problem+json")
    body = busy.json()
    assert body["code"] == "unavailable"
    assert body["status"] == 503
    assert body["retry_after"] == 1
    assert "pool" not in busy.text.lower() and "SELECT" not in busy.text
    assert after.status_code == 200
    assert after.json()["flow"]["id"] == flow_id
