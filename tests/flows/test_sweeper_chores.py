"""The sweeper's chores reclaim dead login attempts, browser sessions and OAuth states."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.connections.repository import purge_states
from service.flows.sweeper import run_chores
from service.identity.sessions import purge_expired
from service.services import Services
from service.settings import Settings
from tests.support.apps import running_app


async def test_chores_drop_only_dead_rows_and_survive_a_failing_one(make_settings: Callable[..., Settings]) -> None:
    # No background upkeep on this instance: nothing but the call below removes the dead row here,
    # so the count is exact.
    async with running_app(make_settings(background_tasks=False)) as elicitd:
        await _chores_case(elicitd.state)


async def _chores_case(services: Services) -> None:
    issuer_id = uuid.uuid4()
    dead, live = os.urandom(32), os.urandom(32)
    async with services.sessions() as session:
        await session.execute(
            text("INSERT INTO issuers (id, issuer, display_name, client_id) VALUES (:id, :iss, 'Chores', 'c')"),
            {"id": issuer_id, "iss": f"https://chores-{issuer_id.hex}.example"},
        )
        await session.execute(
            text(
                "INSERT INTO browser_sessions (id, issuer_id, iss, sub, csrf_secret, expires_at) VALUES "
                "(:dead, :issuer, 'https://i', 'u', :secret, now() - interval '1 minute'), "
                "(:live, :issuer, 'https://i', 'u', :secret, now() + interval '1 hour')"
            ),
            {"dead": dead, "live": live, "issuer": issuer_id, "secret": os.urandom(32)},
        )
        await session.commit()

    async def broken(session: AsyncSession) -> int:
        raise RuntimeError("boom")

    removed = await run_chores(services.flows, [broken, purge_expired, purge_states])
    async with services.sessions() as session:
        left = (
            (await session.execute(text("SELECT id FROM browser_sessions WHERE issuer_id = :i"), {"i": issuer_id}))
            .scalars()
            .all()
        )
    assert removed >= 1
    assert [bytes(x) for x in left] == [live]
