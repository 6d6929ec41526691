"""Server clients through the admin API: key rotation with grace, disable, limits (429 shared by
replicas), and an audit row per call that names the token id, never the token."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from service.identity.keys import hash_key
from service.settings import Settings
from tests.admin.conftest import Token, admin_http, make_token
from tests.support.apps import RunningApp, running_app


async def _create(app: RunningApp, token: Token, **extra: object) -> dict[str, Any]:
    # These clients name users without their tokens: the tests are about keys, limits and webhooks.
    body = {"name": f"c-{uuid.uuid4().hex[:10]}", "subject_proof": "none", **extra}
    async with admin_http(app, token) as http:
        response = await http.post("/admin/v1/server-clients", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _flow_body(sub: str = "u-1", tag: str = "") -> dict[str, Any]:
    return {
        "subject": {"iss": "https://id.example.com", "sub": sub},
        "kind": "external",
        "url": f"https://app.example.com/step/{tag or uuid.uuid4().hex}",
    }


async def test_rotate_key_keeps_the_old_key_for_the_grace_period(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    created = await _create(elicitd, tokens["admin"])
    old_key, client_id = created["api_key"], created["client"]["id"]
    async with admin_http(elicitd, tokens["admin"]) as http:
        rotated = await http.post(f"/admin/v1/server-clients/{client_id}/keys/rotate", json={"grace_seconds": 2})
    assert rotated.status_code == 200
    new_key = rotated.json()["api_key"]
    assert new_key != old_key
    assert [k["active"] for k in rotated.json()["client"]["keys"]] == [True, True]
    async with elicitd.http(old_key) as old, elicitd.http(new_key) as new:
        assert (await old.post("/v1/flows", json=_flow_body())).status_code == 201
        assert (await new.post("/v1/flows", json=_flow_body())).status_code == 201
        # The database clock counts the grace: the old key expires 2 s after the rotation (the
        # new key's creation). Moving its expiry back by those 2 s stands in for waiting them out.
        keys = {"old": hash_key(old_key), "new": hash_key(new_key)}
        async with elicitd.state.sessions() as session:
            grace = (
                await session.execute(
                    text(
                        "SELECT o.expires_at - n.created_at FROM server_client_keys o, server_client_keys n "
                        "WHERE o.key_hash = :old AND n.key_hash = :new"
                    ),
                    keys,
                )
            ).scalar_one()
            await session.execute(
                text(
                    "UPDATE server_client_keys SET expires_at = expires_at - interval '2 seconds' WHERE key_hash = :old"
                ),
                keys,
            )
            await session.commit()
        assert grace == timedelta(seconds=2)
        assert (await old.post("/v1/flows", json=_flow_body())).status_code == 401
        assert (await new.post("/v1/flows", json=_flow_body())).status_code == 201


async def test_disable_stops_the_client(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    created = await _create(elicitd, tokens["admin"])
    async with admin_http(elicitd, tokens["admin"]) as http:
        disabled = await http.post(f"/admin/v1/server-clients/{created['client']['id']}/disable")
    assert disabled.json()["disabled"] is True
    async with elicitd.http(created["api_key"]) as http:
        assert (await http.post("/v1/flows", json=_flow_body())).status_code == 401


async def test_set_providers_issuers_and_bad_webhook(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    created = await _create(elicitd, tokens["admin"])
    path = f"/admin/v1/server-clients/{created['client']['id']}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        changed = await http.patch(
            path,
            json={"allowed_providers": ["slack", "github", "github"], "trusted_issuers": ["https://id.example.com"]},
        )
        unknown = await http.patch(path, json={"colour": "red"})
        insecure = await http.put(path + "/webhook", json={"url": "http://hooks.example.com/x"})
        no_hook = await http.post(path + "/webhook/rotate-secret")
    assert changed.status_code == 200
    assert changed.json()["allowed_providers"] == ["github", "slack"]
    assert changed.json()["trusted_issuers"] == ["https://id.example.com"]
    assert unknown.status_code == 400
    assert insecure.status_code == 400
    assert insecure.json()["code"] == "invalid_webhook_url"
    assert no_hook.status_code == 400
    assert no_hook.json()["code"] == "no_webhook"
    async with elicitd.http(created["api_key"]) as http:
        refused = await http.post(
            "/v1/flows", json={**_flow_body(), "subject": {"iss": "https://evil.example.com", "sub": "x"}}
        )
    assert refused.status_code == 403


async def test_flows_per_minute_is_shared_by_replicas(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings()) as one, running_app(make_settings()) as two:
        admin = await make_token(one, "admin")
        # The window is the database's minute: a burst that straddles two minutes is not this
        # test's case, so it is run again with a fresh client (at most once more, in practice).
        for _ in range(3):
            created = await _create(one, admin, flows_per_minute=5)
            before = await _database_minute(one)
            async with one.http(created["api_key"]) as a, two.http(created["api_key"]) as b:
                answers = await asyncio.gather(
                    *((a if i % 2 else b).post("/v1/flows", json=_flow_body(f"u-{i}")) for i in range(8))
                )
            if await _database_minute(one) == before:
                break
        else:
            raise AssertionError("every burst straddled a minute")
        statuses = sorted(r.status_code for r in answers)
        limited = [r for r in answers if r.status_code == 429]
        metrics = (await one.http().get("/metrics")).text + (await two.http().get("/metrics")).text
    assert statuses == [201] * 5 + [429] * 3
    for response in limited:
        assert response.json()["code"] == "rate_limited"
        assert 1 <= int(response.headers["retry-after"]) <= 60
    assert "elicitd_rate_limited_total" in metrics


async def _database_minute(app: RunningApp) -> datetime:
    async with app.state.sessions() as session:
        minute: datetime = (await session.execute(text("SELECT date_trunc('minute', now())"))).scalar_one()
    return minute


async def test_pending_per_subject_set_through_the_api(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    created = await _create(elicitd, tokens["admin"])
    async with admin_http(elicitd, tokens["admin"]) as http:
        patched = await http.patch(
            f"/admin/v1/server-clients/{created['client']['id']}", json={"pending_per_subject": 2}
        )
    assert patched.json()["pending_per_subject"] == 2
    async with elicitd.http(created["api_key"]) as http:
        answers = [await http.post("/v1/flows", json=_flow_body("same")) for _ in range(3)]
    assert [r.status_code for r in answers] == [201, 201, 429]
    assert answers[2].headers["retry-after"] == "30"


async def test_every_admin_call_is_audited_with_the_token_id(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    viewer = await make_token(elicitd, "viewer")
    async with admin_http(elicitd, viewer) as http:
        assert (await http.get("/admin/v1/stats")).status_code == 200
        assert (await http.post("/admin/v1/server-clients", json={"name": "nope-nope"})).status_code == 403
    async with admin_http(elicitd) as http:
        assert (await http.get("/admin/v1/stats", headers={"Authorization": "Bearer eat_x_bad"})).status_code == 401
    async with admin_http(elicitd, tokens["admin"]) as http:
        audit = (await http.get("/admin/v1/audit", params={"admin_token_id": viewer.id})).json()["items"]
    assert [(a["operation"], a["status"], a["role"]) for a in audit] == [
        ("adminCreateServerClient", 403, "viewer"),
        ("adminStats", 200, "viewer"),
    ]
    assert all(a["admin_token_id"] == viewer.id for a in audit)
    async with elicitd.state.sessions() as session:
        rows = (await session.execute(text("SELECT admin_audit_log::text FROM admin_audit_log"))).scalars().all()
    assert not any(viewer.secret in row or tokens["admin"].secret in row for row in rows)
    # The anonymous call has no row (tests/admin/test_audit.py).


async def test_pending_per_subject_holds_under_concurrent_creates(
    elicitd: RunningApp, tokens: dict[str, Token]
) -> None:
    """Twenty different requests for one subject at once: exactly the quota is created."""
    created = await _create(elicitd, tokens["admin"])
    async with admin_http(elicitd, tokens["admin"]) as http:
        await http.patch(f"/admin/v1/server-clients/{created['client']['id']}", json={"pending_per_subject": 3})
    import asyncio

    async with elicitd.http(created["api_key"]) as http:
        answers = await asyncio.gather(*(http.post("/v1/flows", json=_flow_body("same")) for _ in range(20)))
    assert sorted(r.status_code for r in answers) == [201] * 3 + [429] * 17
