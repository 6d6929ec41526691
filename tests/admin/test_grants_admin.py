"""Grants and trust groups through the admin API: an operator gives a connection nobody can use
(the migration found no creator for it) to a server client, audited; revokes it; groups clients."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tests.admin.conftest import PROVIDER_CLIENT, Token, admin_http, make_connection, make_provider
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.oauth_server import OAuthServer


async def _token(app: RunningApp, client: ServerClientHandle, provider: str, connection: str) -> int:
    async with app.state.sessions() as session:
        iss, sub = (
            await session.execute(
                text("SELECT subject_iss, subject_sub FROM connections WHERE id = :id"),
                {"id": uuid.UUID(connection[3:])},
            )
        ).one()
    async with app.http(client.api_key) as http:
        response = await http.get(f"/v1/connections/{provider}/token", params={"iss": iss, "sub": sub})
    return response.status_code


async def _audit(app: RunningApp, operation: str) -> list[tuple[str | None, int | None]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT target, status FROM admin_audit_log WHERE operation = :op ORDER BY at"), {"op": operation}
        )
        return [(r[0], r[1]) for r in rows]


async def test_an_operator_gives_and_revokes_a_grant_audited(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    provider = await make_provider(elicitd, oauth)
    minted = oauth.mint(f"u{uuid.uuid4().hex[:8]}", client_id=PROVIDER_CLIENT, scope="files:read")
    connection = await make_connection(
        elicitd, oauth, provider, access_token=minted["access_token"], refresh_token=minted["refresh_token"]
    )
    client = await new_server_client(elicitd, display_name="Rescued Assistant")
    assert await _token(elicitd, client, provider, connection) == 404  # nobody was granted it

    async with admin_http(elicitd, tokens["admin"]) as http:
        given = await http.put(
            f"/admin/v1/connections/{connection}/grants/{client.name}", json={"scopes": ["files:read"]}
        )
        assert given.status_code == 200, given.text
        view = given.json()
        assert view["connection_id"] == connection
        assert view["grantee"] == {
            "type": "server_client",
            "id": client.public_id,
            "display_name": "Rescued Assistant",
            "members": [],
        }
        assert (view["scopes"], view["origin"], view["revoked_at"]) == (["files:read"], "admin", None)
        assert minted["access_token"] not in given.text and minted["refresh_token"] not in given.text
        assert await _token(elicitd, client, provider, connection) == 200
        assert (f"connection_id={connection},grantee={client.name}", 200) in await _audit(elicitd, "adminGiveGrant")

        listed = (await http.get("/admin/v1/grants", params={"connection_id": connection})).json()
        assert [item["id"] for item in listed["items"]] == [view["id"]]
        assert minted["access_token"] not in str(listed)

        revoked = await http.post(f"/admin/v1/grants/{view['id']}/revoke")
        assert revoked.status_code == 200
        assert (revoked.json()["revoked_by"], revoked.json()["revoked_at"] is not None) == ("admin", True)
        assert await _token(elicitd, client, provider, connection) == 404
        assert (f"grant_id={view['id']}", 200) in await _audit(elicitd, "adminRevokeGrant")
        live = (await http.get("/admin/v1/grants", params={"connection_id": connection, "live": True})).json()
        assert live["items"] == []

        missing = await http.put(
            f"/admin/v1/connections/cn_{uuid.uuid4().hex}/grants/{client.name}", json={"scopes": []}
        )
        assert (missing.status_code, missing.json()["code"]) == (404, "connection_not_found")
        stranger = await http.put(f"/admin/v1/connections/{connection}/grants/no-such-client", json={})
        assert (stranger.status_code, stranger.json()["code"]) == (400, "unknown_server_client")
    async with admin_http(elicitd, tokens["operator"]) as http:
        refused = await http.put(f"/admin/v1/connections/{connection}/grants/{client.name}", json={})
        assert refused.status_code == 403
    assert await _token(elicitd, client, provider, connection) == 404


async def test_trust_groups_share_grants_and_leaving_ends_them(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    provider = await make_provider(elicitd, oauth)
    connection = await make_connection(elicitd, oauth, provider)
    files = await new_server_client(elicitd, display_name="Acme Files Assistant")
    mail = await new_server_client(elicitd, display_name="Acme Mail")
    outsider = await new_server_client(elicitd, display_name="Outsider")
    name = f"corp-{uuid.uuid4().hex[:6]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        made = await http.post(
            "/admin/v1/trust-groups",
            json={
                "name": name,
                "display_name": "Example Corp",
                "members": [files.name, mail.public_id],
                "allow_unproven": True,  # the test clients name users without their tokens
            },
        )
        assert made.status_code == 201, made.text
        group = made.json()
        assert sorted(m["display_name"] for m in group["members"]) == ["Acme Files Assistant", "Acme Mail"]
        twice = await http.post("/admin/v1/trust-groups", json={"name": name, "display_name": "Again"})
        assert (twice.status_code, twice.json()["code"]) == (409, "trust_group_exists")
        elsewhere = await http.post(
            "/admin/v1/trust-groups",
            json={
                "name": f"other-{uuid.uuid4().hex[:6]}",
                "display_name": "Other",
                "members": [files.name],
                "allow_unproven": True,
            },
        )
        assert (elsewhere.status_code, elsewhere.json()["code"]) == (409, "in_another_group")
        unknown = await http.post(
            "/admin/v1/trust-groups",
            json={"name": f"x-{uuid.uuid4().hex[:6]}", "display_name": "X", "members": ["nope"]},
        )
        assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_server_client")

        given = await http.put(f"/admin/v1/connections/{connection}/grants/{group['id']}", json={"scopes": []})
        assert given.json()["grantee"]["type"] == "trust_group"
        assert sorted(given.json()["grantee"]["members"]) == ["Acme Files Assistant", "Acme Mail"]
        assert [await _token(elicitd, c, provider, connection) for c in (files, mail, outsider)] == [200, 200, 404]

        left = await http.patch(f"/admin/v1/trust-groups/{name}", json={"members": [files.name]})
        assert [m["name"] for m in left.json()["members"]] == [files.name]
        assert [await _token(elicitd, c, provider, connection) for c in (files, mail)] == [200, 404]

        deleted = await http.delete(f"/admin/v1/trust-groups/{name}")
        assert deleted.status_code == 200
        assert await _token(elicitd, files, provider, connection) == 404  # the group's grants went with it
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).status_code == 404


async def _ready(app: RunningApp) -> tuple[int, int, list[str]]:
    async with app.http() as http:
        answer = await http.get("/readyz")
    body = answer.json()
    return answer.status_code, body["trust_groups_allowing_unproven"], body.get("warnings", [])


async def test_a_client_without_subject_proof_joins_only_a_group_that_allows_it(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    proven = await new_server_client(elicitd, subject_proof="required")
    unproven = await new_server_client(elicitd, subject_proof="none")
    name = f"corp-{uuid.uuid4().hex[:6]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        refused = await http.post(
            "/admin/v1/trust-groups", json={"name": name, "display_name": "Example Corp", "members": [unproven.name]}
        )
        assert (refused.status_code, refused.json()["code"]) == (409, "unproven_member")
        assert unproven.name in refused.json()["detail"]
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).status_code == 404  # nothing was made

        made = await http.post(
            "/admin/v1/trust-groups", json={"name": name, "display_name": "Example Corp", "members": [proven.name]}
        )
        assert made.status_code == 201, made.text
        assert (made.json()["allow_unproven"], made.json()["warnings"]) == (False, [])
        assert [(m["name"], m["subject_proof"]) for m in made.json()["members"]] == [(proven.name, "required")]
        joined = await http.patch(f"/admin/v1/trust-groups/{name}", json={"members": [proven.name, unproven.name]})
        assert (joined.status_code, joined.json()["code"]) == (409, "unproven_member")
        shown = (await http.get(f"/admin/v1/trust-groups/{name}")).json()
        assert [m["name"] for m in shown["members"]] == [proven.name]

        # The proven member's proof cannot be dropped while it is in a group that does not allow that.
        lowered = await http.patch(f"/admin/v1/server-clients/{proven.public_id}", json={"subject_proof": "none"})
        assert (lowered.status_code, lowered.json()["code"]) == (409, "unproven_member")
        assert name in lowered.json()["detail"]
        client = (await http.get(f"/admin/v1/server-clients/{proven.public_id}")).json()
        assert client["subject_proof"] == "required"

        status, allowing, warnings = await _ready(elicitd)
        allowed = await http.patch(
            f"/admin/v1/trust-groups/{name}",
            json={"allow_unproven": True, "members": [proven.name, unproven.name]},
        )
        assert allowed.status_code == 200, allowed.text
        assert (allowed.json()["allow_unproven"], allowed.json()["warnings"]) == (True, ["unproven_members_allowed"])
        assert sorted((m["name"], m["subject_proof"]) for m in allowed.json()["members"]) == sorted(
            [(proven.name, "required"), (unproven.name, "none")]
        )
        listed = {g["name"]: g for g in (await http.get("/admin/v1/trust-groups")).json()}
        assert listed[name]["warnings"] == ["unproven_members_allowed"]
        assert await _ready(elicitd) == (200, allowing + 1, ["trust_groups_allow_unproven_members"])
        assert status == 200 and warnings == (["trust_groups_allow_unproven_members"] if allowing else [])

        # Stopping the allowance is refused while an unproven member remains, then accepted
        # when the same call leaves only proven members.
        kept = await http.patch(f"/admin/v1/trust-groups/{name}", json={"allow_unproven": False})
        assert (kept.status_code, kept.json()["code"]) == (409, "unproven_member")
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).json()["allow_unproven"] is True
        ended = await http.patch(
            f"/admin/v1/trust-groups/{name}", json={"allow_unproven": False, "members": [proven.name]}
        )
        assert ended.status_code == 200, ended.text
        assert (ended.json()["allow_unproven"], ended.json()["warnings"]) == (False, [])
        assert (await _ready(elicitd))[1] == allowing

        # Removed from the group, the client may drop its proof.
        assert (await http.patch(f"/admin/v1/trust-groups/{name}", json={"members": []})).status_code == 200
        dropped = await http.patch(f"/admin/v1/server-clients/{proven.public_id}", json={"subject_proof": "none"})
        assert (dropped.status_code, dropped.json()["subject_proof"]) == (200, "none")


async def test_trust_group_display_names_follow_the_text_rule(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    spoof = "Example\u202e proC"
    client = await new_server_client(elicitd)
    name = f"corp-{uuid.uuid4().hex[:6]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        as_client = await http.patch(f"/admin/v1/server-clients/{client.public_id}", json={"display_name": spoof})
        made = await http.post("/admin/v1/trust-groups", json={"name": name, "display_name": spoof})
        assert (made.status_code, made.json()["code"]) == (400, as_client.json()["code"]) == (400, "invalid_request")
        assert "U+202E" in made.json()["detail"] and spoof not in made.text
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).status_code == 404
        assert (
            await http.post("/admin/v1/trust-groups", json={"name": name, "display_name": "Fine"})
        ).status_code == 201
        renamed = await http.patch(f"/admin/v1/trust-groups/{name}", json={"display_name": "Line\u2028break"})
        assert (renamed.status_code, renamed.json()["code"]) == (400, "invalid_request")
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).json()["display_name"] == "Fine"


async def test_a_flag_that_is_not_a_json_boolean_is_refused_and_changes_nothing(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    unproven = await new_server_client(elicitd, subject_proof="none")
    name = f"corp-{uuid.uuid4().hex[:6]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        for flag in (1, 0, "true", "false"):
            made = await http.post(
                "/admin/v1/trust-groups",
                json={"name": name, "display_name": "Example Corp", "members": [], "allow_unproven": flag},
            )
            assert (made.status_code, made.json()["code"]) == (400, "invalid_request"), made.text
            assert "allow_unproven" in made.json()["detail"]
        assert (await http.get(f"/admin/v1/trust-groups/{name}")).status_code == 404
        made = await http.post("/admin/v1/trust-groups", json={"name": name, "display_name": "Example Corp"})
        assert made.status_code == 201, made.text
        changed = await http.patch(
            f"/admin/v1/trust-groups/{name}", json={"allow_unproven": 1, "members": [unproven.name]}
        )
        assert (changed.status_code, changed.json()["code"]) == (400, "invalid_request")
        shown = (await http.get(f"/admin/v1/trust-groups/{name}")).json()
        assert (shown["allow_unproven"], shown["members"]) == (False, [])
        # A body that is not JSON at all is the same 400 as on any route, never a 500.
        garbled = await http.patch(
            f"/admin/v1/trust-groups/{name}", content=b"S\xff\xfe2", headers={"Content-Type": "application/json"}
        )
        assert (garbled.status_code, garbled.json()["code"]) == (400, "invalid_request")
        # null where the field takes it, and a real boolean, are read as they are.
        kept = await http.patch(f"/admin/v1/trust-groups/{name}", json={"allow_unproven": None})
        assert (kept.status_code, kept.json()["allow_unproven"]) == (200, False)
