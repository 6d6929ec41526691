"""Admin stats and the provider / expiry filters, on flows whose times are set exactly in the
database (one fresh server client per test, so the figures are exact in a shared database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from service.db.base import FLOW_ID, uuid7
from tests.admin.conftest import Token, admin_http, create_flow, hooked_client
from tests.support.apps import RunningApp, new_server_client

EXPIRY_BASE = datetime(2031, 1, 1, tzinfo=UTC)

_PLANT = text("""
INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, provider, reuse_key, message, status,
                   expires_at, created_at, completed_at)
VALUES (:id, :client, :kind, 'https://id.example.com', :sub, :provider, :reuse_key, 'planted', CAST(:status AS text),
        :expires_at, now() - make_interval(secs => :ago),
        CASE WHEN CAST(:status AS text) = 'pending' THEN NULL
             ELSE now() - make_interval(secs => :ago) + make_interval(secs => :took) END)
""")


async def plant(app: RunningApp, client: uuid.UUID, rows: list[dict[str, Any]]) -> list[str]:
    """Insert flows in one transaction, ids in list order; each row: kind, status, provider, ago
    (seconds since creation), took (seconds from creation to the terminal transition), day (expiry)."""
    ids = []
    # uuid7 orders by millisecond only: sorted, list order is id order (the admin list's order).
    flow_ids = sorted(uuid7() for _ in rows)
    async with app.state.sessions() as session:
        for row, flow_id in zip(rows, flow_ids, strict=True):
            await session.execute(
                _PLANT,
                {
                    "id": flow_id,
                    "client": client,
                    "kind": row["kind"],
                    "sub": f"u-{uuid.uuid4().hex[:8]}",
                    "provider": row.get("provider"),
                    "reuse_key": uuid.uuid4().hex,
                    "status": row["status"],
                    "expires_at": EXPIRY_BASE + timedelta(days=row.get("day", 0)),
                    "ago": float(row.get("ago", 600)),
                    "took": float(row.get("took", 0)),
                },
            )
            ids.append(FLOW_ID.format(flow_id))
        await session.commit()
    return ids


async def get_stats(app: RunningApp, token: Token, **params: str) -> Any:
    async with admin_http(app, token) as http:
        response = await http.get("/admin/v1/stats", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def test_stats_are_exact_for_one_server_client_over_a_window(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    client, _ = await hooked_client(elicitd)  # its webhook is a closed port: the cancel below stays undelivered
    tag = uuid.uuid4().hex[:8]
    first, second = f"{tag}-a", f"{tag}-b"
    await plant(
        elicitd,
        client.id,
        [
            {"kind": "oauth_connect", "provider": first, "status": "completed", "ago": 1800, "took": 10},
            {"kind": "oauth_connect", "provider": first, "status": "completed", "ago": 1500, "took": 20},
            {"kind": "oauth_connect", "provider": first, "status": "completed", "ago": 1200, "took": 60},
            {"kind": "oauth_connect", "provider": first, "status": "failed", "ago": 900, "took": 5},
            {"kind": "oauth_connect", "provider": first, "status": "pending", "ago": 600},
            {"kind": "api_key", "provider": second, "status": "completed", "ago": 1700, "took": 7.5},
            {"kind": "api_key", "provider": second, "status": "completed", "ago": 1600, "took": 12.5},
            {"kind": "api_key", "provider": second, "status": "expired", "ago": 1400, "took": 900},
            {"kind": "external", "status": "completed", "ago": 1000, "took": 3},
            # Two hours old: outside a one-hour window, inside a three-hour one.
            {"kind": "oauth_connect", "provider": first, "status": "completed", "ago": 7200, "took": 100},
        ],
    )
    cancelled = await create_flow(elicitd, client)
    async with admin_http(elicitd, tokens["operator"]) as http:
        assert (await http.post(f"/admin/v1/flows/{cancelled}/cancel")).status_code == 200

    hour = await get_stats(elicitd, tokens["viewer"], window="1h", server_client=client.public_id)
    assert hour["window_seconds"] == 3600
    assert hour["counts"] == [
        {"status": "cancelled", "kind": "external", "count": 1},
        {"status": "completed", "kind": "api_key", "count": 2},
        {"status": "completed", "kind": "external", "count": 1},
        {"status": "completed", "kind": "oauth_connect", "count": 3},
        {"status": "expired", "kind": "api_key", "count": 1},
        {"status": "failed", "kind": "oauth_connect", "count": 1},
        {"status": "pending", "kind": "oauth_connect", "count": 1},
    ]
    assert hour["providers"] == [
        {"provider": None, "created": 2, "completed": 1, "completion_rate": 0.5, "median_seconds_to_complete": 3.0},
        {"provider": first, "created": 5, "completed": 3, "completion_rate": 0.6, "median_seconds_to_complete": 20.0},
        {
            "provider": second,
            "created": 3,
            "completed": 2,
            "completion_rate": 0.6667,
            "median_seconds_to_complete": 10.0,
        },
    ]
    assert hour["webhook_backlog"] == 1

    three = await get_stats(elicitd, tokens["viewer"], window="3h", server_client=client.public_id)
    assert three["window_seconds"] == 10800
    assert {"status": "completed", "kind": "oauth_connect", "count": 4} in three["counts"]
    assert three["providers"][1] == {
        "provider": first,
        "created": 6,
        "completed": 4,
        "completion_rate": 0.6667,
        "median_seconds_to_complete": 40.0,
    }

    quiet = await new_server_client(elicitd)
    empty = await get_stats(elicitd, tokens["viewer"], window="1h", server_client=quiet.public_id)
    assert (empty["counts"], empty["providers"], empty["webhook_backlog"]) == ([], [], 0)
    async with admin_http(elicitd, tokens["viewer"]) as http:
        bad = await http.get("/admin/v1/stats", params={"server_client": "nope"})
    assert bad.status_code == 400
    assert bad.headers["content-type"].startswith("application/problem+json")


async def test_provider_and_expiry_filters_return_exact_ids(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    provider = f"{uuid.uuid4().hex[:8]}-files"
    ids = await plant(
        elicitd,
        client.id,
        [
            {"kind": "oauth_connect", "provider": provider, "status": "pending", "day": 0},
            {"kind": "oauth_connect", "provider": provider, "status": "completed", "took": 4, "day": 1},
            {"kind": "api_key", "provider": f"{provider}-other", "status": "pending", "day": 2},
            {"kind": "external", "status": "pending", "day": 3},
            {"kind": "oauth_connect", "provider": provider, "status": "expired", "took": 60, "day": 4},
        ],
    )

    async def listed(**params: str) -> list[str]:
        async with admin_http(elicitd, tokens["viewer"]) as http:
            response = await http.get(
                "/admin/v1/flows", params={"server_client": client.public_id, "limit": 500, **params}
            )
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    def day(n: int) -> str:
        return (EXPIRY_BASE + timedelta(days=n)).isoformat()

    assert await listed() == ids[::-1]
    assert await listed(provider=provider) == [ids[4], ids[1], ids[0]]
    assert await listed(provider=f"{provider}-other") == [ids[2]]
    assert await listed(provider="no-such-provider") == []
    # expires_after is inclusive, expires_before exclusive: [after, before).
    assert await listed(expires_after=day(1), expires_before=day(4)) == [ids[3], ids[2], ids[1]]
    assert await listed(expires_before=day(1)) == [ids[0]]
    assert await listed(expires_after=day(4)) == [ids[4]]
    assert await listed(expires_after=day(5)) == []
    assert await listed(provider=provider, expires_after=day(1)) == [ids[4], ids[1]]
    assert await listed(provider=provider, status="pending", expires_before=day(3)) == [ids[0]]
