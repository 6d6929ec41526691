"""The admin audit trail: a change and its row commit together or not at all, and anonymous calls
write nothing (anyone could otherwise grow the table without limit)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sqlalchemy import text

from tests.admin.conftest import Token, admin_http, create_flow
from tests.support.apps import RunningApp, new_server_client


async def audit_rows(app: RunningApp, *, target: str | None = None) -> list[tuple[str, int | None, str | None]]:
    async with app.state.sessions() as session:
        found = await session.execute(
            text(
                "SELECT operation, status, target FROM admin_audit_log "
                "WHERE (CAST(:t AS text) IS NULL OR target = :t) ORDER BY id"
            ),
            {"t": target},
        )
        return [(r.operation, r.status, r.target) for r in found]


async def audit_count(app: RunningApp) -> int:
    async with app.state.sessions() as session:
        return int((await session.execute(text("SELECT count(*) FROM admin_audit_log"))).scalar_one())


Refuse = Callable[[str], Awaitable[None]]


@pytest.fixture
async def refuse_audit(elicitd: RunningApp) -> AsyncIterator[Refuse]:
    """``await refuse_audit(target)``: the database refuses audit rows for ``target`` from then on
    (a check constraint, dropped after the test)."""
    targets: list[str] = []
    name = f"test_refuse_{uuid.uuid4().hex[:8]}"

    async def refuse(target: str) -> None:
        targets.append(target.replace("'", "''"))
        listed = ", ".join(f"'{t}'" for t in targets)
        async with elicitd.state.sessions() as session:
            await session.execute(text(f"ALTER TABLE admin_audit_log DROP CONSTRAINT IF EXISTS {name}"))
            await session.execute(
                text(f"ALTER TABLE admin_audit_log ADD CONSTRAINT {name} CHECK (target NOT IN ({listed})) NOT VALID")
            )
            await session.commit()

    yield refuse
    async with elicitd.state.sessions() as session:
        await session.execute(text(f"ALTER TABLE admin_audit_log DROP CONSTRAINT IF EXISTS {name}"))
        await session.commit()


async def test_anonymous_admin_calls_write_no_row(elicitd: RunningApp) -> None:
    before = await audit_count(elicitd)
    async with admin_http(elicitd) as http:
        for headers in ({}, {"Authorization": "Bearer eat_x_bad"}, {"Authorization": "Basic x"}):
            assert (await http.get("/admin/v1/stats", headers=headers)).status_code == 401
            assert (await http.post("/admin/v1/server-clients", json={"name": "x"}, headers=headers)).status_code == 401
    assert await audit_count(elicitd) == before


async def test_a_change_commits_with_its_row(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    target = f"client_id={client.public_id}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        response = await http.post(f"/admin/v1/server-clients/{client.public_id}/disable")
    assert response.status_code == 200
    assert await audit_rows(elicitd, target=target) == [("adminDisableServerClient", 200, target)]


async def test_a_change_whose_row_cannot_be_written_is_undone(
    elicitd: RunningApp, tokens: dict[str, Token], refuse_audit: Refuse
) -> None:
    client = await new_server_client(elicitd)
    await refuse_audit(f"client_id={client.public_id}")
    async with admin_http(elicitd, tokens["admin"]) as http:
        response = await http.post(f"/admin/v1/server-clients/{client.public_id}/disable")
    assert response.status_code == 500
    async with elicitd.state.sessions() as session:
        disabled = (
            await session.execute(text("SELECT disabled FROM server_clients WHERE id = :id"), {"id": client.id})
        ).scalar_one()
    assert disabled is False  # the change went with the row that could not be written
    async with elicitd.http(client.api_key) as http:
        assert (await http.get("/v1/flows/fl_" + "0" * 32)).status_code == 404  # the key still works


async def test_a_flow_cancel_is_undone_with_its_row(
    elicitd: RunningApp, tokens: dict[str, Token], refuse_audit: Refuse
) -> None:
    """The cancel runs in the flow service's own unit of work: the row rides in it all the same."""
    client = await new_server_client(elicitd)
    flow_id = await create_flow(elicitd, client)
    await refuse_audit(f"flow_id={flow_id}")
    async with admin_http(elicitd, tokens["operator"]) as http:
        refused = await http.post(f"/admin/v1/flows/{flow_id}/cancel")
    assert refused.status_code == 500
    async with elicitd.http(client.api_key) as http:
        assert (await http.get(f"/v1/flows/{flow_id}")).json()["flow"]["status"] == "pending"


async def test_the_row_says_what_the_call_answered(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    flow_id = await create_flow(elicitd, client)
    async with admin_http(elicitd, tokens["operator"]) as http:
        first = await http.post(f"/admin/v1/flows/{flow_id}/cancel")
        again = await http.post(f"/admin/v1/flows/{flow_id}/cancel")
    assert (first.status_code, again.status_code) == (200, 409)
    target = f"flow_id={flow_id}"
    assert await audit_rows(elicitd, target=target) == [
        ("adminCancelFlow", 200, target),
        ("adminCancelFlow", 409, target),
    ]
