"""Scopes are read with the provider's own separator everywhere: at the code exchange, after every
refresh, and in what a caller may ask for (a comma-separated provider, as Slack and Linear are)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from sqlalchemy import text

from service.connections import oauth
from service.db.base import CONNECTION_ID
from service.settings import Settings
from tests.connections.conftest import (
    Env,
    expire_soon,
    new_sub,
    plant_connection,
    register_provider,
)
from tests.support.apps import new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer


@pytest.fixture(scope="module")
async def comma_env(make_settings: Callable[..., Settings], oauth: OAuthServer) -> AsyncIterator[Env]:
    async with running_app(make_settings()) as app:
        await register_issuer(app, oauth)
        name = f"commas-{uuid.uuid4().hex[:8]}"
        await register_provider(app, oauth, name, scope_separator=",")
        yield Env(app=app, oauth=oauth, provider=name)


def test_split_scopes_reads_the_separator_it_is_given() -> None:
    assert oauth.split_scopes("b a  b", " ") == ["a", "b"]
    assert oauth.split_scopes("chat:write,files:read", ",") == ["chat:write", "files:read"]
    assert oauth.split_scopes("chat:write, files:read,", ",") == ["chat:write", "files:read"]


async def stored_scopes(env: Env, connection: str) -> list[str]:
    async with env.app.state.sessions() as session:
        found = await session.execute(
            text("SELECT scopes FROM connections WHERE id = :id"), {"id": CONNECTION_ID.parse(connection)}
        )
        return list(found.scalar_one())


async def test_a_refresh_keeps_every_scope_of_a_comma_separated_provider(comma_env: Env) -> None:
    env = comma_env
    connection, _ = await plant_connection(env, new_sub("slacky"), scope="files:read,files:write")
    assert await stored_scopes(env, connection) == ["files:read", "files:write"]
    for _ in range(2):  # the first refresh used to join them into one; the second must not either
        await expire_soon(env, connection)
        connection_id = CONNECTION_ID.parse(connection)
        assert connection_id is not None
        refreshed = await env.app.state.connections.refresh_by_id(connection_id)
        assert refreshed is not None
        assert list(refreshed.scopes or []) == ["files:read", "files:write"]
    assert await stored_scopes(env, connection) == ["files:read", "files:write"]


async def test_a_requested_scope_holding_the_separator_is_refused(comma_env: Env) -> None:
    env = comma_env
    client = await new_server_client(env.app)
    body = {
        "subject": {"iss": env.iss, "sub": new_sub("joined")},
        "kind": "oauth_connect",
        "provider": env.provider,
        "scopes": ["files:read,files:write"],
    }
    async with env.app.http(client.api_key) as http:
        joined = await http.post("/v1/flows", json=body)
        separate = await http.post("/v1/flows", json={**body, "scopes": ["files:read", "files:write"]})
    assert joined.status_code == 400
    assert joined.json()["code"] == "invalid_scope"
    assert separate.status_code == 201, separate.text
