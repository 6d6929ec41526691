"""``elicitd_connections`` is counted in PostgreSQL at most once a window per replica
(``ELICITD_METRICS_CONNECTION_COUNT_SECONDS``): scrapes within it serve the last count, the first
scrape after it counts again, and a scrape still shows no subject."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from sqlalchemy import text

from service.settings import Settings
from tests.support.apps import RunningApp, running_app
from tests.support.clock import ManualClock


async def add(app: RunningApp, provider: str, sub: str, health: str = "healthy") -> None:
    status = "reauthorization_required" if health == "needs_reauthorization" else "active"
    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO connections (subject_iss, subject_sub, provider, account_id, status, health, id) "
                "VALUES ('https://id.example', :sub, :p, :sub, :status, :health, gen_random_uuid())"
            ),
            {"sub": sub, "p": provider, "status": status, "health": health},
        )
        await session.commit()


async def scrape(app: RunningApp) -> str:
    async with app.http() as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    return response.text


async def test_connections_are_counted_at_most_once_a_window(make_settings: Callable[..., Settings]) -> None:
    clock = ManualClock()
    settings = make_settings(extra={"METRICS_CONNECTION_COUNT_SECONDS": "30"})
    async with running_app(settings, clock=clock) as app:
        provider = f"gauge-{uuid.uuid4().hex[:8]}"
        async with app.state.sessions() as session:
            await session.execute(
                text("INSERT INTO providers (name, display_name, client_id) VALUES (:p, 'Gauge', 'c')"), {"p": provider}
            )
            await session.commit()
        healthy = f'elicitd_connections{{health="healthy",provider="{provider}"}}'
        broken = f'elicitd_connections{{health="needs_reauthorization",provider="{provider}"}}'
        await add(app, provider, "gauge-alice")
        await add(app, provider, "gauge-bob")

        first = await scrape(app)
        await add(app, provider, "gauge-carol", "needs_reauthorization")
        clock.advance(29)
        within = await asyncio.gather(*(scrape(app) for _ in range(5)))
        clock.advance(2)
        after = await scrape(app)

    assert f"{healthy} 2.0" in first
    assert all(f"{healthy} 2.0" in page and broken not in page for page in within)
    assert f"{healthy} 2.0" in after and f"{broken} 1.0" in after
    assert "gauge-alice" not in after and "gauge-carol" not in after
