"""Migration 0014 gives existing authorizations and connections the health their status implies,
and the check that health follows status holds from then on; downgrading drops the columns (and
the connection event deliveries, which have no flow) and leaves the rows as they were."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from service.db.migrate import downgrade_async, upgrade_async

BEFORE = "0013"


async def test_health_is_backfilled_from_status_and_follows_it(new_database: Callable[[], Awaitable[str]]) -> None:
    url = await new_database()
    await upgrade_async(url, BEFORE)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    db = await asyncpg.connect(dsn)
    ids = {status: uuid.uuid4() for status in ("active", "reauthorization_required", "revoked")}
    try:
        await db.execute("INSERT INTO providers (name, display_name, client_id) VALUES ('files', 'Files', 'c')")
        for status, row_id in ids.items():
            await db.execute(
                "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, status) "
                "VALUES ($1, 'https://id', $2::text, 'files', $2::text, $2::text)",
                row_id,
                status,
            )
            await db.execute(
                "INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, status) "
                "VALUES ($1, $1, 'https://id', $2::text, 'files', $2::text, $2::text)",
                row_id,
                status,
            )
    finally:
        await db.close()

    await upgrade_async(url, "0014")

    db = await asyncpg.connect(dsn)
    try:
        for table in ("authorizations", "connections"):
            rows = await db.fetch(f"SELECT status, health, health_reason FROM {table} ORDER BY status")
            assert [tuple(r) for r in rows] == [
                ("active", "healthy", None),
                ("reauthorization_required", "needs_reauthorization", "provider_refused"),
                ("revoked", "revoked", "revoked"),
            ]
        # The previous release writes only the status: the trigger brings the health along.
        await db.execute("UPDATE authorizations SET status = 'reauthorization_required' WHERE id = $1", ids["active"])
        assert await db.fetchval("SELECT health FROM authorizations WHERE id = $1", ids["active"]) == (
            "needs_reauthorization"
        )
        await db.execute("UPDATE authorizations SET status = 'active' WHERE id = $1", ids["active"])
        assert await db.fetchval("SELECT health FROM authorizations WHERE id = $1", ids["active"]) == "healthy"
        with pytest.raises(asyncpg.CheckViolationError):
            await db.execute("UPDATE authorizations SET health = 'revoked' WHERE id = $1", ids["active"])
    finally:
        await db.close()

    await downgrade_async(url, BEFORE)

    db = await asyncpg.connect(dsn)
    try:
        columns = await db.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'authorizations' "
            "AND column_name IN ('health', 'health_reason', 'checked_at', 'refresh_expires_at')"
        )
        assert columns == []
        statuses = await db.fetch("SELECT status FROM authorizations ORDER BY status")
        assert [r[0] for r in statuses] == ["active", "reauthorization_required", "revoked"]
    finally:
        await db.close()
