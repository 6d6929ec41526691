"""Migration 0023: a URL written to the old webhook columns (``PUT …/webhook``, this release's or
the previous one's) makes the legacy endpoint ``pending_verification`` like any new endpoint; a
legacy endpoint that was already active stays so while its URL stays; a disabled one stays
disabled. The downgrade brings back 0018's active-at-once trigger."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from service.db.migrate import downgrade_async, upgrade_async

BEFORE = "0022"
STATE = "SELECT state, verified_at IS NOT NULL, challenge_attempts FROM webhook_endpoints WHERE server_client_id = $1"


async def test_a_url_written_to_the_old_columns_must_answer_the_challenge(
    new_database: Callable[[], Awaitable[str]],
) -> None:
    url = await new_database()
    await upgrade_async(url, BEFORE)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    active, fresh, disabled = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    db = await asyncpg.connect(dsn)
    try:
        for client, name in ((active, "active"), (fresh, "fresh"), (disabled, "disabled")):
            await db.execute("INSERT INTO server_clients (id, name, display_name) VALUES ($1, $2, $2)", client, name)
        # Before 0023: the old columns' first URL is active at once.
        for client in (active, disabled):
            await db.execute(
                "UPDATE server_clients SET webhook_url = 'https://hooks.example.com/a', webhook_secret_key_id = 'k1', "
                "webhook_secret_enc = '\\x01'::bytea WHERE id = $1",
                client,
            )
        assert tuple(await db.fetchrow(STATE, active)) == ("active", True, 0)
        await db.execute("UPDATE webhook_endpoints SET state = 'disabled' WHERE server_client_id = $1", disabled)
    finally:
        await db.close()

    await upgrade_async(url, "0023")

    db = await asyncpg.connect(dsn)
    try:
        # What was active stays active: the migration re-challenges nobody.
        assert tuple(await db.fetchrow(STATE, active)) == ("active", True, 0)
        # A new filter or secret at the same URL keeps the state.
        await db.execute(
            "UPDATE server_clients SET webhook_events = ARRAY['flow.completed'], webhook_secret_enc = '\\x02'::bytea "
            "WHERE id = $1",
            active,
        )
        assert tuple(await db.fetchrow(STATE, active)) == ("active", True, 0)
        # A changed URL must answer the challenge, due now, from its first attempt.
        await db.execute(
            "UPDATE webhook_endpoints SET challenge_attempts = 3, failing_since = now() WHERE server_client_id = $1",
            active,
        )
        await db.execute("UPDATE server_clients SET webhook_url = 'https://hooks.example.com/b' WHERE id = $1", active)
        row = await db.fetchrow(
            "SELECT state, verified_at, challenge_attempts, challenge_next_at <= now(), failing_since, url "
            "FROM webhook_endpoints WHERE server_client_id = $1",
            active,
        )
        assert tuple(row) == ("pending_verification", None, 0, True, None, "https://hooks.example.com/b")
        # A first webhook is pending too.
        await db.execute(
            "UPDATE server_clients SET webhook_url = 'https://hooks.example.com/f', webhook_secret_key_id = 'k1', "
            "webhook_secret_enc = '\\x03'::bytea WHERE id = $1",
            fresh,
        )
        assert tuple(await db.fetchrow(STATE, fresh)) == ("pending_verification", False, 0)
        # A disabled endpoint stays disabled whatever its URL.
        await db.execute(
            "UPDATE server_clients SET webhook_url = 'https://hooks.example.com/d' WHERE id = $1", disabled
        )
        assert (await db.fetchrow(STATE, disabled))["state"] == "disabled"
    finally:
        await db.close()

    await downgrade_async(url, BEFORE)
    db = await asyncpg.connect(dsn)
    try:
        await db.execute("UPDATE server_clients SET webhook_url = 'https://hooks.example.com/g' WHERE id = $1", fresh)
        assert (await db.fetchrow(STATE, fresh))["state"] == "active"
    finally:
        await db.close()
