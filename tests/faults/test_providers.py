"""An OAuth provider that hangs or answers garbage while elicitd refreshes a token through it.

The provider is the real OAuth test server, reached through a TCP proxy the test controls: paused
(the provider accepts the connection and never answers), or answering garbage in its place. The
token request ends in ``502 provider_refresh_failed`` — within the call deadline for a hang —
never a 500; every other request of the instance stays fast meanwhile (no pooled connection is
held during the call); the connection is left as it was (active, claim released, refresh token
unspent), so once the provider is back the next token request refreshes it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from service.connections import oauth
from service.connections.providers import ProviderSpec, upsert_provider
from service.settings import Settings
from tests.connections.conftest import (
    PROVIDER_CLIENT_ID,
    PROVIDER_SECRET,
    Env,
    accepted_by_provider,
    plant_connection,
)
from tests.faults.load import make_flows, percentile, record
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.faults import TcpProxy
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer

pytestmark = pytest.mark.slow

HTML = b"<html><body>Service temporarily unavailable</body></html>"
GARBAGE = {
    "an HTML page": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(HTML), HTML),
    "JSON that is not": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{not json",
    "bytes that are not HTTP": b"\x16\x03\x01\x00\xa5garbage\r\n\r\n",
}


@pytest.fixture(scope="module")
def provider_server() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def proxy(provider_server: OAuthServer) -> Iterator[TcpProxy]:
    port = httpx.URL(provider_server.base_url).port
    assert port is not None
    proxy = TcpProxy("127.0.0.1", port).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@dataclass
class Setup:
    env: Env
    client: ServerClientHandle
    proxy: TcpProxy


@pytest.fixture(scope="module")
async def setup(
    make_fault_settings: Callable[..., Settings], provider_server: OAuthServer, proxy: TcpProxy
) -> AsyncIterator[Setup]:
    """An instance whose provider's token endpoint is reached through the proxy."""
    async with running_app(make_fault_settings()) as app:
        await register_issuer(app, provider_server)
        name = f"flaky-{uuid.uuid4().hex[:6]}"
        spec = ProviderSpec(
            name=name,
            catalog="oauth2",
            display_name="Flaky Files",
            authorization_endpoint=provider_server.url("/authorize"),
            token_endpoint=f"http://127.0.0.1:{proxy.port}/token",
            account_endpoint=provider_server.url("/api/me"),
            account_id_field="id",
            account_login_field="login",
            client_id=PROVIDER_CLIENT_ID,
            client_secret=PROVIDER_SECRET,
            default_scopes=("files:read",),
        )
        async with app.state.sessions() as session:
            await upsert_provider(session, spec, app.state.vault)
            await session.commit()
        provider_server.register_client(
            PROVIDER_CLIENT_ID, PROVIDER_SECRET, redirect_uris=[app.url + "/connect/callback"]
        )
        client = await new_server_client(app, subject_proof="none")
        yield Setup(Env(app=app, oauth=provider_server, provider=name), client, proxy)


async def _expired_connection(setup: Setup) -> tuple[str, str]:
    """A connection of a new subject whose access token has expired: the next token request must refresh."""
    sub = f"flaky-{uuid.uuid4().hex[:8]}"
    connection, _ = await plant_connection(setup.env, sub, granted_to=setup.client)
    await _execute(
        setup.env.app,
        "UPDATE authorizations SET expires_at = now() - interval '1 second' "
        "WHERE 'cn_' || replace(connection_id::text, '-', '') = :c",
        c=connection,
    )
    return connection, sub


async def _execute(app: RunningApp, sql: str, **params: str) -> None:
    async with app.state.sessions() as session:
        await session.execute(text(sql), params)
        await session.commit()


async def _row(app: RunningApp, connection: str) -> tuple[str, object, bytes]:
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text(
                    "SELECT status, refresh_claim, refresh_token_enc FROM connections "
                    "WHERE 'cn_' || replace(id::text, '-', '') = :c"
                ),
                {"c": connection},
            )
        ).one()
    return row[0], row[1], row[2]


def _token(http: httpx.AsyncClient, setup: Setup, sub: str) -> asyncio.Task[httpx.Response]:
    params = {"iss": setup.env.iss, "sub": sub}
    return asyncio.create_task(http.get(f"/v1/connections/{setup.env.provider}/token", params=params))


async def test_a_hanging_provider_ends_in_502_at_the_deadline_and_costs_nothing_else(setup: Setup) -> None:
    app = setup.env.app
    connection, sub = await _expired_connection(setup)
    before = await _row(app, connection)
    pool = app.state.engine.pool
    assert isinstance(pool, QueuePool)
    loop = asyncio.get_running_loop()
    async with app.http(setup.client.api_key) as http:
        reads = await make_flows(http, 5, f"hang-{uuid.uuid4().hex[:6]}")
        setup.proxy.pause()
        try:
            started = loop.time()
            hung = _token(http, setup, sub)
            # Meanwhile: one read after the other until the token request ends, and the pool.
            latencies: list[float] = []
            checked_out: list[int] = []
            while not hung.done():
                sent = loop.time()
                assert (await http.get(f"/v1/flows/{reads[len(latencies) % 5]}")).status_code == 200
                latencies.append(loop.time() - sent)
                checked_out.append(pool.checkedout())
                await asyncio.sleep(0.05)
            answer = await hung
            took = loop.time() - started
            after = await _row(app, connection)
        finally:
            setup.proxy.drop()  # the held request must never reach the provider later
            setup.proxy.resume()
        again = await _token(http, setup, sub)
    record(
        "provider hangs during a token refresh",
        {
            "answer": answer.status_code,
            "code": answer.json().get("code"),
            "answered_after_s": round(took, 2),
            "reads_meanwhile": len(latencies),
            "read_ms_p99": round(percentile(latencies, 0.99) * 1000, 1),
            "pool_checked_out_max": max(checked_out),
            "pool_size": pool.size(),
            "after_the_provider_is_back": again.status_code,
        },
    )
    assert answer.status_code == 502, answer.text
    assert answer.json()["code"] == "provider_refresh_failed"
    assert oauth.CALL_DEADLINE_SECONDS - 0.5 <= took < oauth.CALL_DEADLINE_SECONDS + 5
    assert len(latencies) > 20
    assert percentile(latencies, 0.99) < 1.0
    assert max(checked_out) < pool.size()
    assert after == (before[0], None, before[2])  # active, no claim left, refresh token unspent
    assert again.status_code == 200, again.text
    assert accepted_by_provider(setup.env, again.json()["access_token"])


@pytest.mark.parametrize("garbage", list(GARBAGE))
async def test_a_provider_answering_garbage_is_a_502_and_changes_nothing(setup: Setup, garbage: str) -> None:
    app = setup.env.app
    connection, sub = await _expired_connection(setup)
    before = await _row(app, connection)
    async with app.http(setup.client.api_key) as http:
        setup.proxy.answer(GARBAGE[garbage])
        setup.proxy.drop()  # no kept-alive connection to the real provider either
        try:
            answer = await _token(http, setup, sub)
            after = await _row(app, connection)
        finally:
            setup.proxy.answer(None)
        again = await _token(http, setup, sub)
    record(f"provider answers {garbage}", {"answer": answer.status_code, "then": again.status_code})
    assert answer.status_code == 502, answer.text
    assert answer.json()["code"] == "provider_refresh_failed"
    assert after == before
    assert again.status_code == 200, again.text
    assert accepted_by_provider(setup.env, again.json()["access_token"])
