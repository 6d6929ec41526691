"""Migration 0008: the server clients that exist keep working as they did (no subject proof);
every client registered afterwards must prove its users, and the policy has two values only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from service.db.migrate import upgrade_async


async def test_the_migration_keeps_existing_clients_working_and_new_ones_must_prove(
    new_database: Callable[[], Awaitable[str]],
) -> None:
    url = await new_database()
    await upgrade_async(url, "0007")
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await connection.execute(
            "INSERT INTO server_clients (id, name, display_name) VALUES (gen_random_uuid(), 'before', 'Before')"
        )
        await upgrade_async(url, "0008")
        await connection.execute(
            "INSERT INTO server_clients (id, name, display_name) VALUES (gen_random_uuid(), 'after', 'After')"
        )
        rows = await connection.fetch("SELECT name, subject_proof, resource_uris FROM server_clients ORDER BY name")
        with pytest.raises(asyncpg.CheckViolationError):
            await connection.execute("UPDATE server_clients SET subject_proof = 'maybe'")
    finally:
        await connection.close()
    assert [tuple(row) for row in rows] == [("after", "required", []), ("before", "none", [])]
