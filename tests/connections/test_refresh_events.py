"""``connection.refreshed`` (``ELICITD_REFRESH_EVENTS=true``; off by default, which
tests/connections/test_health.py holds: a refresh there tells nobody): every refresh — a proactive
pass's and the token endpoint's — appends the event for each grantee in the statement that stores
the new token, on the stream and for the webhook, carrying the new expiry and never a token."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from service.connections.refresher import Refresher, RefreshSettings
from service.settings import Settings
from tests.admin.conftest import answered_challenge
from tests.connections.conftest import Env, connection_rows, get_token, new_sub, plant_connection, register_provider
from tests.support.apps import ServerClientHandle, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer


@pytest.fixture(scope="module")
async def env(make_settings: Callable[..., Settings], oauth: OAuthServer) -> AsyncIterator[Env]:
    async with running_app(make_settings(extra={"REFRESH_EVENTS": "true"})) as app:
        await register_issuer(app, oauth)
        name = f"files-{uuid.uuid4().hex[:8]}"
        await register_provider(app, oauth, name)
        yield Env(app=app, oauth=oauth, provider=name)


@pytest.fixture
async def client(env: Env) -> ServerClientHandle:
    handle = await new_server_client(env.app, display_name="Acme Files Assistant")
    async with env.app.state.sessions() as session:
        # A webhook (its secret never opened here: nothing is delivered to port 9).
        await session.execute(
            text(
                "UPDATE server_clients SET webhook_url = 'http://127.0.0.1:9/hook', webhook_secret_enc = '\\x00', "
                "webhook_secret_key_id = 'k' WHERE id = :c"
            ),
            {"c": handle.id},
        )
        await session.commit()
    await answered_challenge(env.app, handle.id)  # verified once; nothing answers on port 9 now
    return handle


async def told(env: Env, client: ServerClientHandle) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    async with env.app.state.sessions() as session:
        stream = await session.execute(
            text("SELECT type, payload FROM events WHERE server_client_id = :c ORDER BY seq"), {"c": client.id}
        )
        queued = await session.execute(
            text("SELECT event_type FROM webhook_outbox WHERE server_client_id = :c ORDER BY created_at"),
            {"c": client.id},
        )
        return [(r[0], r[1]) for r in stream], [r[0] for r in queued]


async def due_in(env: Env, sub: str, interval: str) -> None:
    async with env.app.state.sessions() as session:
        await session.execute(
            text(f"UPDATE authorizations SET expires_at = now() + interval '{interval}' WHERE subject_sub = :s"),
            {"s": sub},
        )
        await session.commit()


async def test_each_refresh_tells_the_grantees_once(env: Env, client: ServerClientHandle) -> None:
    sub = new_sub()
    ref, minted = await plant_connection(env, sub, granted_to=client)
    await due_in(env, sub, "2 minutes")

    passed = await Refresher(env.app.state.connections, RefreshSettings(batch_size=5000)).run_once()
    assert passed.outcomes.get("refreshed") == 1
    stream, queued = await told(env, client)
    assert [kind for kind, _ in stream] == ["connection.refreshed"]
    assert queued == ["connection.refreshed"]
    payload = stream[0][1]
    assert (payload["connection_id"], payload["provider"], payload["status"], payload["reason"]) == (
        ref,
        env.provider,
        "healthy",
        None,
    )
    assert datetime.fromisoformat(payload["expires_at"]) > datetime.now(UTC) + timedelta(minutes=50)
    assert minted["access_token"] not in str(payload) and minted["refresh_token"] not in str(payload)

    await due_in(env, sub, "10 seconds")  # the token endpoint's own refresh (within its 60 s margin)
    answer = await get_token(env, client, sub)
    assert answer.status_code == 200
    stream, queued = await told(env, client)
    assert [kind for kind, _ in stream] == ["connection.refreshed", "connection.refreshed"]
    assert queued == ["connection.refreshed", "connection.refreshed"]
    assert answer.json()["access_token"] not in str(stream)
    (row,) = await connection_rows(env.app, sub)
    assert row["health"] == "healthy"
