"""Admin flow listing (filters, keyset pages under concurrent inserts), history, cancel and expire."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sqlalchemy import text

from tests.admin.conftest import Token, admin_http, complete_flow, create_flow
from tests.support.apps import RunningApp, new_server_client


async def _all_pages(http: Any, params: dict[str, Any], during_each_page: Any = None) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await http.get("/admin/v1/flows", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        seen.extend(item["id"] for item in body["items"])
        if during_each_page is not None:
            await during_each_page()
        cursor = body["next_cursor"]
        if cursor is None:
            return seen


async def test_pages_are_complete_and_stable_under_concurrent_inserts(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    client = await new_server_client(elicitd)
    existing = [await create_flow(elicitd, client) for _ in range(23)]
    inserted: list[str] = []

    async def insert_more() -> None:
        inserted.extend(await asyncio.gather(*(create_flow(elicitd, client) for _ in range(3))))

    async with admin_http(elicitd, tokens["viewer"]) as http:
        seen = await _all_pages(http, {"server_client": client.public_id, "limit": 5}, insert_more)
    # Every flow that existed when paging began appears exactly once, newest first; rows inserted
    # meanwhile are newer than the first page and never shift the later ones.
    assert seen == list(reversed(existing))
    assert len(inserted) == 15


async def test_filters(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    other = await new_server_client(elicitd)
    sub = f"u-{uuid.uuid4().hex[:8]}"
    a = await create_flow(elicitd, client, sub=sub)
    b = await create_flow(elicitd, client, sub=sub, iss="https://other-issuer.example.com")
    c = await create_flow(elicitd, client)
    d = await create_flow(elicitd, other, sub=sub)
    assert (await complete_flow(elicitd, client, c)).status_code == 200
    async with elicitd.state.sessions() as session:
        await session.execute(
            text("UPDATE flows SET expires_at = now() + interval '3 days' WHERE id = :i"), {"i": uuid.UUID(a[3:])}
        )
        created_b = (
            await session.execute(text("SELECT created_at FROM flows WHERE id = :i"), {"i": uuid.UUID(b[3:])})
        ).scalar_one()
        await session.commit()

    async def ids(**params: Any) -> list[str]:
        async with admin_http(elicitd, tokens["viewer"]) as http:
            response = await http.get("/admin/v1/flows", params={"limit": 500, **params})
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    assert await ids(server_client=client.public_id) == [c, b, a]
    assert await ids(server_client=client.public_id, status="pending") == [b, a]
    assert await ids(server_client=client.public_id, status="completed") == [c]
    assert await ids(server_client=client.public_id, kind="consent") == []
    assert await ids(server_client=client.public_id, kind="external") == [c, b, a]
    assert await ids(subject_iss="https://id.example.com", subject_sub=sub) == [d, a]
    assert await ids(subject_iss="https://other-issuer.example.com", subject_sub=sub) == [b]
    assert await ids(server_client=client.public_id, expires_after="2100-01-01T00:00:00Z") == []
    assert await ids(server_client=client.public_id, created_before=created_b.isoformat()) == [a]
    assert await ids(server_client=client.public_id, created_after=created_b.isoformat()) == [c, b]
    async with admin_http(elicitd, tokens["viewer"]) as http:
        bad_status = await http.get("/admin/v1/flows", params={"status": "bogus"})
        bad_cursor = await http.get("/admin/v1/flows", params={"cursor": "!!"})
        sub_only = await http.get("/admin/v1/flows", params={"subject_sub": sub})
    assert bad_status.status_code == 400
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["code"] == "invalid_cursor"
    assert sub_only.status_code == 400


async def test_show_has_the_full_history(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    flow_id = await create_flow(elicitd, client)
    async with admin_http(elicitd, tokens["operator"]) as http:
        cancelled = await http.post(f"/admin/v1/flows/{flow_id}/cancel")
        again = await http.post(f"/admin/v1/flows/{flow_id}/cancel")
        shown = await http.get(f"/admin/v1/flows/{flow_id}")
        missing = await http.get("/admin/v1/flows/fl_" + "0" * 32)
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert again.status_code == 409
    assert again.json()["code"] == "flow_not_pending"
    # RFC 9457: the problem's ``status`` is the HTTP status; the flow's is ``flow_status``.
    assert (again.json()["status"], again.json()["flow_status"]) == (409, "cancelled")
    assert missing.status_code == 404
    events = shown.json()["events"]
    assert [(e["type"], e["actor"], e["to_status"]) for e in events] == [
        ("created", "api", "pending"),
        ("transition", "admin", "cancelled"),
    ]
    assert events[1]["detail"] == {"admin_token_id": tokens["operator"].id}


async def test_expire_now(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    flow_id = await create_flow(elicitd, client)
    async with admin_http(elicitd, tokens["operator"]) as http:
        expired = await http.post(f"/admin/v1/flows/{flow_id}/expire")
    assert expired.status_code == 200
    assert expired.json()["status"] == "expired"
    async with elicitd.http(client.api_key) as http:
        status = await http.get(f"/v1/flows/{flow_id}")
    assert status.json()["flow"]["status"] == "expired"


async def test_cancel_racing_completion_leaves_exactly_one_terminal_state(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    client = await new_server_client(elicitd)
    for _ in range(10):
        flow_id = await create_flow(elicitd, client)
        async with admin_http(elicitd, tokens["operator"]) as http:
            cancel, complete = await asyncio.gather(
                http.post(f"/admin/v1/flows/{flow_id}/cancel"), complete_flow(elicitd, client, flow_id)
            )
        statuses = sorted([cancel.status_code, complete.status_code])
        assert statuses == [200, 409]
        async with elicitd.state.sessions() as session:
            transitions = (
                await session.execute(
                    text("SELECT count(*) FROM flow_events WHERE flow_id = :f AND type = 'transition'"),
                    {"f": uuid.UUID(flow_id[3:])},
                )
            ).scalar_one()
            status = (
                await session.execute(text("SELECT status FROM flows WHERE id = :f"), {"f": uuid.UUID(flow_id[3:])})
            ).scalar_one()
        assert transitions == 1
        assert status == ("cancelled" if cancel.status_code == 200 else "completed")
