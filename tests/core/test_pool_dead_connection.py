"""A pooled connection the server closed is replaced at checkout: no request fails for it."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
from sqlalchemy import text

from service.flows.schemas import Subject
from service.settings import Settings
from tests.flows.helpers import create_external
from tests.support.apps import new_server_client, running_app
from tests.support.waiting import until


def _asyncpg_url(settings: Settings) -> str:
    return settings.database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def test_connection_terminated_by_the_server_is_replaced_without_a_failed_request(
    make_settings: Callable[..., Settings], subject: Subject
) -> None:
    # One pooled connection, used one request at a time, so every request reuses it.
    settings = make_settings(db_pool_size=1, db_statement_pool_size=1, background_tasks=False, api_key_cache_seconds=0)
    async with running_app(settings) as app:
        client = await new_server_client(app)
        async with app.http(client.api_key) as http:
            created = await create_external(http, subject)
            flow_id = created["flow"]["id"]
            async with app.state.sessions() as session:
                pid = (await session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                pooled = (await (await session.connection()).get_raw_connection()).driver_connection
            assert pooled is not None
            # The status read runs on the statement pool's one connection: the server closes it too.
            statements = app.state.direct.pool
            held = await statements.acquire()
            statement_connection = held.connection
            statements.release(held)
            statement_pid = statement_connection.get_server_pid()
            admin = await asyncpg.connect(_asyncpg_url(settings))
            try:
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid) is True
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", statement_pid) is True
                # The app's loop reads the closed socket; only then does the pool know to replace it.
                await until(pooled.is_closed, what="the pooled connection seen closed")
                await until(statement_connection.is_closed, what="the statement pool's connection seen closed")
                answers = [await http.get(f"/v1/flows/{flow_id}") for _ in range(3)]
                after = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'elicitd' AND datname = "
                    "current_database() AND pid <> ALL($1::int[])",
                    [pid, statement_pid],
                )
            finally:
                await admin.close()
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert all(a.json()["flow"]["id"] == flow_id for a in answers)
    assert after >= 2  # new connections took the terminated ones' places, in both pools
