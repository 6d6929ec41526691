"""``/readyz`` refuses readiness while the schema is older than the code's newest migration, and
stays ready on a newer one: during a rolling upgrade new replicas wait for ``elicitd migrate``
before they take traffic, and the previous release keeps serving after it has run."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from service.db.migrate import upgrade_async
from service.health import known_revisions
from service.settings import Settings, normalize_database_url
from tests.support import backends
from tests.support.apps import running_app


async def _ready(settings: Settings) -> tuple[int, str | None, str]:
    async with running_app(settings) as app, app.http() as http:
        answer = await http.get("/readyz")
    body = answer.json()
    return answer.status_code, body.get("schema"), body["status"]


async def test_readiness_waits_for_the_migration_and_survives_the_next_one(
    backend: backends.Backends, make_settings: Callable[..., Settings]
) -> None:
    head, known = known_revisions()
    previous = sorted(known)[-2]
    url = await backends.create_database(backend.server_url)
    settings = make_settings(database_url=normalize_database_url(url), background_tasks=False)
    try:
        # Never migrated: no alembic_version table at all.
        assert await _ready(settings) == (503, "behind", "unavailable")
        await upgrade_async(normalize_database_url(url), previous)
        assert await _ready(settings) == (503, "behind", "unavailable")
        await upgrade_async(normalize_database_url(url))
        assert await _ready(settings) == (200, "current", "ready")
        # The next release's migration has run (a revision this code has never seen): still ready.
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("UPDATE alembic_version SET version_num = $1", f"{head}_next")
        finally:
            await conn.close()
        assert await _ready(settings) == (200, "ahead", "ready")
    finally:
        await backends.drop_database(backend.server_url, url)
