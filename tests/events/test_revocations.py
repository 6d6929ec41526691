"""``connection.revoked`` and ``grant.revoked`` on the stream: written in the revoking transaction,
to the server clients that were granted the connection, and to nobody else."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy import text

from service.db.base import CONNECTION_ID
from service.grants.models import GRANT_ID
from service.settings import Settings
from tests.events.test_stream import FAST, reading
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.factories import connection_granted_to, offline_provider
from tests.support.waiting import until

ISS = "https://id.example.com"


async def grant_of(app: RunningApp, connection_id: uuid.UUID, client: ServerClientHandle) -> uuid.UUID:
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT id FROM grants WHERE connection_id = :c AND server_client_id = :s"),
            {"c": connection_id, "s": client.id},
        )
        return uuid.UUID(str(found.scalar_one()))


async def test_revocations_reach_the_granted_clients_only(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        provider = await offline_provider(app)
        one, two, stranger = [await new_server_client(app) for _ in range(3)]
        sub = f"u{uuid.uuid4().hex[:8]}"
        first = await connection_granted_to(app, provider, ISS, sub, "work", one, two)
        second = await connection_granted_to(app, provider, ISS, sub, "home", one)
        async with reading(app, one) as to_one, reading(app, two) as to_two, reading(app, stranger) as to_stranger:
            # The subject takes back one client's access on /me: only that grantee hears of it.
            grant = await grant_of(app, first, two)
            assert await app.state.grants.revoke_for_subject(GRANT_ID.format(grant), iss=ISS, sub=sub) is True
            await until(lambda: len(to_two.events) == 1, what="grant.revoked")
            # The subject disconnects the other connection: its grantee hears of both.
            assert await app.state.grants.disconnect(CONNECTION_ID.format(second), iss=ISS, sub=sub) is True
            await until(lambda: len(to_one.events) == 2, what="connection.revoked and grant.revoked")
        assert to_stranger.events == []
    revoked = to_two.events[0]
    assert revoked.type == "grant.revoked"
    assert revoked.data["grant_id"] == GRANT_ID.format(grant)
    assert revoked.data["connection_id"] == CONNECTION_ID.format(first)
    assert (revoked.data["provider"], revoked.data["account_id"]) == (provider, "work")
    assert revoked.data["subject"] == {"iss": ISS, "sub": sub}
    assert (revoked.data["revoked_by"], revoked.data["scopes"]) == ("subject", ["files:read"])
    gone, ended = to_one.events
    assert (gone.type, gone.data["connection_id"]) == ("connection.revoked", CONNECTION_ID.format(second))
    assert (ended.type, ended.data["connection_id"], ended.data["revoked_by"]) == (
        "grant.revoked",
        CONNECTION_ID.format(second),
        "disconnect",
    )


async def stored_types(app: RunningApp, client: ServerClientHandle) -> list[str]:
    """The event types stored for ``client``, in stream order."""
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT type FROM events WHERE server_client_id = :c ORDER BY seq"), {"c": client.id}
        )
        return [str(t) for t in found.scalars()]


async def queued_types(app: RunningApp, client: ServerClientHandle) -> list[str]:
    """The webhook outbox's event types for ``client``, oldest first."""
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT event_type FROM webhook_outbox WHERE server_client_id = :c ORDER BY id"), {"c": client.id}
        )
        return [str(t) for t in found.scalars()]


async def test_connection_revoked_reaches_only_the_grants_still_live(make_settings: Callable[..., Settings]) -> None:
    """A client whose grant ended before the connection did was told then, by ``grant.revoked``,
    and hears nothing of the connection afterwards; the client still holding a grant hears
    ``connection.revoked``."""
    async with running_app(make_settings(extra=FAST)) as app:
        provider = await offline_provider(app)
        live, ended = [await new_server_client(app) for _ in range(2)]
        sub = f"u{uuid.uuid4().hex[:8]}"
        connection = await connection_granted_to(app, provider, ISS, sub, "work", live, ended)
        async with reading(app, live) as to_live, reading(app, ended) as to_ended:
            grant = await grant_of(app, connection, ended)
            assert await app.state.grants.revoke_for_subject(GRANT_ID.format(grant), iss=ISS, sub=sub) is True
            await until(lambda: len(to_ended.events) == 1, what="grant.revoked")
            outcome = await app.state.connections.revoke_by_id(connection)
            assert outcome is not None
            assert outcome.revoked == [CONNECTION_ID.format(connection)]
            await until(lambda: len(to_live.events) == 1, what="connection.revoked")
        # The events table is what every stream reads: exact per client, committed before
        # ``revoke_by_id`` returned.
        assert [(e.type, e.data["connection_id"]) for e in to_live.events] == [
            ("connection.revoked", CONNECTION_ID.format(connection))
        ]
        assert [(e.type, e.data["grant_id"]) for e in to_ended.events] == [("grant.revoked", GRANT_ID.format(grant))]
        assert await stored_types(app, live) == ["connection.revoked"]
        assert await stored_types(app, ended) == ["grant.revoked"]
        # Revocations are stream events: neither client gets one through the webhook outbox.
        assert await queued_types(app, live) == []
        assert await queued_types(app, ended) == []
