"""Migration 0018 makes each server client's single webhook its first endpoint (the sealed secret
moved as it was), mirrors the previous release's writes of the old columns into it, and
downgrades, dropping what only endpoints could address."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from service.db.migrate import downgrade_async, upgrade_async

BEFORE = "0017"


async def test_the_webhook_becomes_the_first_endpoint_and_follows_the_old_columns(
    new_database: Callable[[], Awaitable[str]],
) -> None:
    url = await new_database()
    await upgrade_async(url, BEFORE)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    hooked, plain = uuid.uuid4(), uuid.uuid4()
    db = await asyncpg.connect(dsn)
    try:
        await db.execute(
            "INSERT INTO server_clients (id, name, display_name, webhook_url, webhook_secret_key_id, "
            "webhook_secret_enc, webhook_events) VALUES ($1, 'hooked', 'Hooked', 'https://hooks.example.com/a', "
            "'k1', '\\x0102'::bytea, ARRAY['flow.completed'])",
            hooked,
        )
        await db.execute("INSERT INTO server_clients (id, name, display_name) VALUES ($1, 'plain', 'Plain')", plain)
    finally:
        await db.close()

    await upgrade_async(url, "0018")

    db = await asyncpg.connect(dsn)
    try:
        rows = await db.fetch(
            "SELECT server_client_id, url, events, state, legacy, secret_key_id, secret_enc FROM webhook_endpoints"
        )
        assert [tuple(r) for r in rows] == [
            (hooked, "https://hooks.example.com/a", ["flow.completed"], "active", True, "k1", b"\x01\x02")
        ]
        # The previous release's PUT …/webhook writes the old columns only: the endpoint follows.
        await db.execute(
            "UPDATE server_clients SET webhook_url = 'https://hooks.example.com/b', webhook_events = NULL, "
            "webhook_secret_key_id = 'k2', webhook_secret_enc = '\\x03'::bytea WHERE id = $1",
            hooked,
        )
        await db.execute(
            "UPDATE server_clients SET webhook_url = 'https://hooks.example.com/p', webhook_secret_key_id = 'k1', "
            "webhook_secret_enc = '\\x04'::bytea WHERE id = $1",
            plain,
        )
        rows = await db.fetch(
            "SELECT server_client_id, url, events, state, secret_key_id, secret_enc FROM webhook_endpoints "
            "WHERE legacy ORDER BY url"
        )
        assert [tuple(r) for r in rows] == [
            (hooked, "https://hooks.example.com/b", None, "active", "k2", b"\x03"),
            (plain, "https://hooks.example.com/p", None, "active", "k1", b"\x04"),
        ]
        await db.execute("UPDATE server_clients SET webhook_url = NULL WHERE id = $1", plain)
        assert await db.fetchval("SELECT count(*) FROM webhook_endpoints WHERE server_client_id = $1", plain) == 0
    finally:
        await db.close()

    await downgrade_async(url, BEFORE)
    db = await asyncpg.connect(dsn)
    try:
        assert await db.fetchval("SELECT to_regclass('webhook_endpoints')") is None
        assert await db.fetchval("SELECT webhook_url FROM server_clients WHERE id = $1", hooked) == (
            "https://hooks.example.com/b"
        )
    finally:
        await db.close()
