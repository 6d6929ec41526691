"""Reconnect links: an operator mints one for a connection (admin API and CLI, each audited); it is
the address of that connection's reconnect flow, which opens a sign-in, never a signed-in page."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import text

from service.db.base import CONNECTION_ID
from service.grants.operators import give_grant
from tests.admin.conftest import Token, admin_http, make_connection, make_provider
from tests.admin.test_audit import audit_rows
from tests.admin.test_secrets_and_cli import _cli, _cli_env
from tests.support.apps import RunningApp, new_server_client
from tests.support.oauth_server import OAuthServer


async def granted_connection(app: RunningApp, oauth: OAuthServer) -> tuple[str, str]:
    """A connection with one server client's grant on it: ``(cn_…, sc_…)``."""
    connection = await make_connection(app, oauth, await make_provider(app, oauth))
    client = await new_server_client(app)
    async with app.state.sessions() as session:
        await give_grant(session, app.state.vault, connection, client.public_id, ["files:read"])
        await session.commit()
    return connection, client.public_id


async def reconnect_flows(app: RunningApp, connection: str) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT id, kind, status, subject_sub FROM flows WHERE connection_id = :c ORDER BY id"),
            {"c": CONNECTION_ID.parse(connection)},
        )
        return [dict(r._mapping) for r in rows]


async def test_an_operator_mints_a_reconnect_link_that_asks_for_the_persons_own_sign_in(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    connection, client = await granted_connection(elicitd, oauth)
    async with admin_http(elicitd, tokens["operator"]) as http:
        minted = await http.post(f"/admin/v1/connections/{connection}/reconnect-link")
        again = await http.post(f"/admin/v1/connections/{connection}/reconnect-link")
        viewer = await http.post(
            f"/admin/v1/connections/{connection}/reconnect-link",
            headers={"Authorization": f"Bearer {tokens['viewer'].secret}"},
        )
        unknown = await http.post("/admin/v1/connections/cn_0123456789abcdef0123456789abcdef/reconnect-link")

    assert minted.status_code == 200, minted.text
    link = minted.json()
    assert (link["connection_id"], link["server_client_id"]) == (connection, client)
    assert link["url"] == f"{elicitd.url}/f/{link['flow_id']}"
    assert again.json()["flow_id"] == link["flow_id"]  # the pending reconnect flow, not a second one
    assert viewer.status_code == 403
    assert (unknown.status_code, unknown.json()["code"]) == (404, "connection_not_found")
    (flow,) = await reconnect_flows(elicitd, connection)
    assert (flow["kind"], flow["status"]) == ("oauth_connect", "pending")

    # The link opens a sign-in at the person's issuer: nothing of the connection is shown to whoever
    # holds it until they sign in as its subject.
    async with httpx.AsyncClient() as browser:
        opened = await browser.get(link["url"])
    assert opened.status_code == 303
    assert opened.headers["location"].startswith(oauth.issuer)
    assert connection not in opened.text

    target = f"connection_id={connection}"
    rows = [r for r in await audit_rows(elicitd, target=target) if r[0] == "adminReconnectLink"]
    assert [r[1] for r in rows] == [200, 200, 403]  # the viewer's refused call is audited too
    async with elicitd.state.sessions() as session:
        logged = (await session.execute(text("SELECT * FROM admin_audit_log WHERE target = :t"), {"t": target})).all()
    assert link["flow_id"] not in str(logged) and link["url"] not in str(logged)


async def test_a_connection_nobody_may_use_has_no_reconnect_link(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    connection = await make_connection(elicitd, oauth, await make_provider(elicitd, oauth))
    async with admin_http(elicitd, tokens["operator"]) as http:
        refused = await http.post(f"/admin/v1/connections/{connection}/reconnect-link")
    assert (refused.status_code, refused.json()["code"]) == (409, "not_reconnectable")
    assert await reconnect_flows(elicitd, connection) == []


async def test_the_cli_mints_the_same_link_audited(
    elicitd: RunningApp, oauth: OAuthServer, database_url: str, backend: Any
) -> None:
    connection, _ = await granted_connection(elicitd, oauth)
    code, out, err = await _cli(
        _cli_env(database_url, backend.redis_url), "connections", "reconnect-link", connection, "--json"
    )
    assert code == 0, err
    link = json.loads(out)
    assert link["connection_id"] == connection
    assert link["url"].endswith(f"/f/{link['flow_id']}")
    (flow,) = await reconnect_flows(elicitd, connection)
    assert flow["status"] == "pending"
    audited = await audit_rows(elicitd)
    assert [r for r in audited if r[0] == "adminReconnectLink" and connection in (r[2] or "")] != [], audited[-3:]
