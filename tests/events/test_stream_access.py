"""Who may hold ``GET /v1/events`` open, how many, and what a key alone reads on it.

A stream outlives the request that authenticated it: its key is checked again, through the key
cache, before every batch and every heartbeat, so a revoked key or a disabled client ends it. A
server client holds at most ``ELICITD_EVENTS_STREAMS_PER_CLIENT`` streams per replica. A client
that must prove the subject reads events without the subject or the account (its API key alone
must not list its users). Time is a ``ManualClock`` where the key cache's lifetime matters.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

import httpx
from sqlalchemy import text
from standardwebhooks import Webhook

from service.grants.models import GRANT_ID
from service.identity.keys import add_key, hash_key
from service.settings import Settings
from tests.admin.conftest import hooked_client
from tests.events.test_revocations import ISS, grant_of
from tests.events.test_stream import FAST, finish, flow_ids, reading
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.clock import ManualClock
from tests.support.factories import connection_granted_to, offline_provider
from tests.support.waiting import until

CACHE_SECONDS = 5.0


async def second_key(app: RunningApp, client: ServerClientHandle) -> ServerClientHandle:
    """The same server client through another of its keys (to write while the first is revoked)."""
    async with app.state.sessions() as session:
        key = await add_key(session, client.id)
        await session.commit()
    return dataclasses.replace(client, api_key=key)


async def execute(app: RunningApp, sql: str, **params: object) -> None:
    async with app.state.sessions() as session:
        await session.execute(text(sql), params)
        await session.commit()


async def armed(clock: ManualClock, seconds: float) -> None:
    """Until a timer of ``seconds`` from now is armed (the stream waiting for its next heartbeat)."""
    await until(lambda: any(abs(d - seconds) < 1e-6 for d in clock.deadlines()), what=f"a {seconds} s timer")


async def test_a_revoked_key_ends_its_stream_once_the_key_cache_lets_go(
    make_settings: Callable[..., Settings],
) -> None:
    clock = ManualClock()
    # No heartbeat while the test runs: only batches re-check the key here.
    settings = make_settings(api_key_cache_seconds=CACHE_SECONDS, extra={"EVENTS_HEARTBEAT_SECONDS": "600"})
    async with running_app(settings, clock=clock) as app:
        client = await new_server_client(app)
        writer = await second_key(app, client)
        async with reading(app, client) as reader:
            first = await finish(app, writer, 1)
            await until(lambda: len(reader.events) == 1, what="the first event")
            await execute(
                app,
                "UPDATE server_client_keys SET revoked_at = now() WHERE key_hash = :digest",
                digest=hash_key(client.api_key),
            )
            # Within the cache's lifetime the key still opens the stream, as it opens every call.
            cached = await finish(app, writer, 1)
            await until(lambda: len(reader.events) == 2, what="the event within the cache's lifetime")
            clock.advance(CACHE_SECONDS)
            await finish(app, writer, 2)
            await until(lambda: reader.ended, what="the stream ended")
            assert app.state.events.streams_of(client.id) == 0
            assert app.state.events.consumers_of(client.id) == 0
        async with app.http(client.api_key) as http:
            again = await http.get("/v1/events")
    assert flow_ids(reader.events) == first + cached
    assert [e.seq for e in reader.events] == [1, 2]
    assert (again.status_code, again.json()["code"]) == (401, "unauthenticated")


async def test_a_disabled_client_s_stream_ends_at_its_first_heartbeat_past_the_cache(
    make_settings: Callable[..., Settings],
) -> None:
    clock = ManualClock()
    settings = make_settings(api_key_cache_seconds=CACHE_SECONDS, extra={"EVENTS_HEARTBEAT_SECONDS": "2"})
    async with running_app(settings, clock=clock) as app:
        client = await new_server_client(app)
        async with reading(app, client) as reader:
            await armed(clock, 2.0)
            await execute(app, "UPDATE server_clients SET disabled = true WHERE id = :id", id=client.id)
            clock.advance(2)  # the cache still vouches for the key: a heartbeat
            await until(lambda: reader.heartbeats == 1, what="the heartbeat within the cache's lifetime")
            await armed(clock, 2.0)
            clock.advance(3)  # 5 s: the heartbeat due at 4 s finds the cache expired and the client disabled
            await until(lambda: reader.ended, what="the stream ended")
            assert app.state.events.streams_of(client.id) == 0
    assert (reader.heartbeats, reader.events) == (1, [])


async def test_each_client_holds_a_bounded_number_of_streams_per_replica(
    make_settings: Callable[..., Settings],
) -> None:
    async with running_app(make_settings(extra={**FAST, "EVENTS_STREAMS_PER_CLIENT": "2"})) as app:
        client = await new_server_client(app)
        other = await new_server_client(app)
        hub = app.state.events
        async with reading(app, client) as one, reading(app, client) as two:
            async with app.http(client.api_key) as http, http.stream("GET", "/v1/events") as refused:
                status = refused.status_code
                headers = refused.headers
                problem = (await refused.aread()) if status != 200 else b""
            assert status == 429
            async with reading(app, other) as elsewhere:
                assert elsewhere.status == 200  # another client's streams are its own
            assert (one.status, two.status, hub.streams_of(client.id)) == (200, 200, 2)
        await until(lambda: hub.streams_of(client.id) == 0, what="both places given back")
        async with reading(app, client) as three, reading(app, client) as four:
            assert (three.status, four.status) == (200, 200)
    assert headers["content-type"].startswith("application/problem+json")
    assert headers["retry-after"] == "1"  # the heartbeat (0.3 s), rounded up: when a gone consumer is noticed
    assert httpx.Response(429, content=problem).json()["code"] == "too_many_streams"


async def test_a_client_that_must_prove_the_subject_reads_events_without_whose_they_are(
    make_settings: Callable[..., Settings],
) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client, secret = await hooked_client(app)
        provider = await offline_provider(app)
        sub = f"u{uuid.uuid4().hex[:8]}"
        done = await finish(app, client, 2)
        connection = await connection_granted_to(app, provider, ISS, sub, "work", client)
        grant = await grant_of(app, connection, client)
        assert await app.state.grants.revoke_for_subject(GRANT_ID.format(grant), iss=ISS, sub=sub) is True
        async with reading(app, client, last_event_id=0) as loose:
            await until(lambda: len(loose.events) == 3, what="every event, whole")
        await execute(
            app,
            "UPDATE server_clients SET subject_proof = 'required', resource_uris = '{https://mcp.example.com/mcp}' "
            "WHERE id = :id",
            id=client.id,
        )
        async with reading(app, client, last_event_id=0) as proving:
            await until(lambda: len(proving.events) == 3, what="every event, key-only")
    assert flow_ids(loose.events[:2]) == flow_ids(proving.events[:2]) == done
    assert [e.type for e in proving.events] == ["flow.completed", "flow.completed", "grant.revoked"]
    for whole, reduced in zip(loose.events, proving.events, strict=True):
        assert (reduced.seq, reduced.id, reduced.type) == (whole.seq, whole.id, whole.type)
        hidden = {"subject", "account_id"}
        assert hidden & set(whole.data) == ({"subject", "account_id"} if whole.type == "grant.revoked" else {"subject"})
        assert reduced.data == {name: value for name, value in whole.data.items() if name not in hidden}
        # Still signed, as sent: the reduced body is what the signature covers.
        assert Webhook(secret).verify(reduced.body, reduced.headers)["data"] == reduced.data
    assert sorted(proving.events[2].data) == [
        "connection_id",
        "grant_id",
        "occurred_at",
        "provider",
        "revoked_by",
        "scopes",
        "type",
    ]
    assert sorted(proving.events[0].data) == [
        "elicitation_id",
        "error_code",
        "flow_id",
        "kind",
        "occurred_at",
        "provider",
        "status",
        "type",
    ]
