"""The grant rule on the MCP-server API, against the real provider process and two replicas.

A server client reads, refreshes and disconnects only connections the subject granted it (or its
trust group), and only for the granted scopes; for anything else it is told exactly what it would
be told if nobody had connected. ``POST /v1/flows`` is answered ``completed`` at once only with a
grant; without one the flow carries the existing connection, for its grant page.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text

from service.connect.plugin import ConnectKindServices
from service.db.base import CONNECTION_ID
from tests.grants.conftest import Story, create_connect_flow, new_sub, plant, token
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.factories import grant_connection


async def grant_to(story: Story, connection: str, client: ServerClientHandle, scopes: list[str]) -> None:
    await grant_connection(story.app, connection, client.id, scopes)


async def flow_connection(story: Story, flow_ref: str) -> str | None:
    async with story.app.state.sessions() as session:
        value = (
            await session.execute(
                text("SELECT connection_id FROM flows WHERE id = :id"), {"id": uuid.UUID(flow_ref[3:])}
            )
        ).scalar_one()
    return None if value is None else CONNECTION_ID.format(value)


async def test_disconnect_follows_the_token_rule(story: Story) -> None:
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice, nobody = new_sub("alice"), new_sub("nobody")
    connection, minted = await plant(story, alice)
    await grant_to(story, connection, a, ["files:read"])
    revocations = len(story.acme.revocations())
    async with story.app.http(b.api_key) as http:
        params = {"iss": story.iss}
        refused = await http.delete(f"/v1/connections/{story.provider}", params={**params, "sub": alice})
        absent = await http.delete(f"/v1/connections/{story.provider}", params={**params, "sub": nobody})
    assert (refused.status_code, refused.json()["code"]) == (404, "not_connected")
    assert refused.content == absent.content
    assert len(story.acme.revocations()) == revocations  # nothing reached the provider
    served = await token(story, a, alice)
    assert (served.status_code, served.json()["access_token"]) == (200, minted["access_token"])
    async with story.app.http(a.api_key) as http:
        done = await http.delete(f"/v1/connections/{story.provider}", params={"iss": story.iss, "sub": alice})
    # A did not connect the account: its DELETE ends its own grant (and hands its token back),
    # not the account.
    body = done.json()
    assert (body["revoked"], len(body["grants_revoked"]), body["revoked_at_provider"]) == ([], 1, True)
    assert (await token(story, a, alice)).status_code == 404


async def test_a_grantee_ends_its_own_grant_and_only_the_connecting_server_disconnects(story: Story) -> None:
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice = new_sub("alice")
    connection, minted = await plant(story, alice)
    async with story.app.state.sessions() as session:
        await session.execute(
            text("UPDATE connections SET connected_by = :a WHERE id = :c"),
            {"a": a.id, "c": CONNECTION_ID.parse(connection)},
        )
        await session.commit()
    await grant_to(story, connection, a, ["files:read"])
    await grant_to(story, connection, b, ["files:read"])
    params = {"iss": story.iss, "sub": alice}
    async with story.app.http(b.api_key) as http:
        ended = await http.delete(f"/v1/connections/{story.provider}", params=params)
    # B shared A's authorization: its grant ends, the authorization stays for A and is not revoked.
    assert (ended.status_code, ended.json()["revoked"], ended.json()["revoked_at_provider"]) == (200, [], False)
    assert len(ended.json()["grants_revoked"]) == 1
    assert (await token(story, b, alice)).status_code == 404
    served = await token(story, a, alice)
    assert (served.status_code, served.json()["access_token"]) == (200, minted["access_token"])
    async with story.app.http(a.api_key) as http:
        done = await http.delete(f"/v1/connections/{story.provider}", params=params)
    assert done.json() == {"revoked": [connection], "revoked_at_provider": True, "grants_revoked": []}


async def test_a_client_uses_only_the_scopes_it_was_granted(story: Story) -> None:
    a = await new_server_client(story.app)
    alice = new_sub("alice")
    connection, _ = await plant(story, alice, scope="files:read files:write")
    await grant_to(story, connection, a, ["files:read"])
    async with story.app.http(a.api_key) as http:
        base = {"iss": story.iss, "sub": alice}
        wider = await http.get(f"/v1/connections/{story.provider}/token", params={**base, "scopes": "files:write"})
        granted = await http.get(f"/v1/connections/{story.provider}/token", params={**base, "scopes": "files:read"})
    assert (wider.status_code, wider.json()["code"], wider.json()["missing"]) == (
        409,
        "insufficient_scope",
        ["files:write"],
    )
    # The grant names less than the token carries (an operator's narrower grant): handing the token
    # out would give more than granted, so it is refused, and no flow reports it as satisfied.
    assert (granted.status_code, granted.json()["code"]) == (409, "authorization_exceeds_grant")
    more = await create_connect_flow(story, a, alice, scopes=["files:write"])
    assert (more["status"], more["flow"]["scopes"]) == ("pending", ["files:write"])
    assert await flow_connection(story, more["flow"]["id"]) == connection
    held = await create_connect_flow(story, a, alice, scopes=["files:read"])
    assert held["status"] == "pending"


async def test_create_completes_at_once_only_with_a_grant(story: Story) -> None:
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice, nobody = new_sub("alice"), new_sub("nobody")
    connection, _ = await plant(story, alice)
    await grant_to(story, connection, a, ["files:read"])
    satisfied = await create_connect_flow(story, a, alice, expect=200)
    assert (satisfied["status"], satisfied["result"]["connection_id"]) == ("completed", connection)
    asked, fresh = await create_connect_flow(story, b, alice), await create_connect_flow(story, b, nobody)
    assert asked["status"] == fresh["status"] == "pending"

    def shape(value: object) -> object:
        if isinstance(value, dict):
            return {key: shape(item) for key, item in value.items() if not key.startswith("elicitd_fl_")}
        return type(value).__name__

    assert shape(asked) == shape(fresh)  # nothing in B's answer tells the two subjects apart
    assert (asked["flow"]["scopes"], asked["mcp"]["inputRequests"] != {}) == (fresh["flow"]["scopes"], True)
    assert await flow_connection(story, asked["flow"]["id"]) == connection  # for the grant page
    assert await flow_connection(story, fresh["flow"]["id"]) is None


async def test_more_scopes_ask_the_provider_for_the_askers_own_never_for_what_others_hold(story: Story) -> None:
    """B asks for more than the account's authorization holds: a provider step for B's scopes only
    (its new authorization is its own, A's stays A's). A asking for more keeps what A holds."""
    a, b = await new_server_client(story.app), await new_server_client(story.app)
    alice = new_sub("alice")
    connection, _ = await plant(story, alice, scope="files:read")
    await grant_to(story, connection, a, ["files:read"])
    asked = await create_connect_flow(story, b, alice, scopes=["files:write"])
    assert asked["flow"]["scopes"] == ["files:write"]  # only what B asked for
    flow = await story.app.state.flows.read(uuid.UUID(asked["flow"]["id"][3:]))
    assert flow is not None
    assert await story.app.state.kind("oauth_connect", ConnectKindServices).connect.kept_scopes(flow) == []
    wider = await create_connect_flow(story, a, alice, scopes=["files:write"])
    assert wider["flow"]["scopes"] == ["files:read", "files:write"]


async def test_last_use_is_written_at_most_once_a_minute(story: Story) -> None:
    a = await new_server_client(story.app)
    alice = new_sub("alice")
    connection, _ = await plant(story, alice)
    await grant_to(story, connection, a, ["files:read"])

    async def last_used() -> object:
        async with story.app.state.sessions() as session:
            return (
                await session.execute(
                    text("SELECT last_used_at FROM grants WHERE connection_id = :c"),
                    {"c": CONNECTION_ID.parse(connection)},
                )
            ).scalar_one()

    assert await last_used() is None
    assert (await token(story, a, alice)).status_code == 200
    first = await last_used()
    assert first is not None
    assert (await token(story, a, alice, app=story.replica)).status_code == 200
    assert await last_used() == first  # within the minute: no write
    async with story.app.state.sessions() as session:
        await session.execute(
            text("UPDATE grants SET last_used_at = now() - interval '2 minutes' WHERE connection_id = :c"),
            {"c": CONNECTION_ID.parse(connection)},
        )
        await session.commit()
    stale = await last_used()
    assert (await token(story, a, alice)).status_code == 200
    assert await last_used() != stale
