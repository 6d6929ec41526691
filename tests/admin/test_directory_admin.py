"""Providers, issuers, connections and payments through the admin API: what each operation does."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from service.connections.discovery import MetadataCache
from service.connections.providers import get_provider, resolve
from tests.admin.conftest import (
    PROVIDER_CLIENT,
    Token,
    admin_http,
    make_connection,
    make_payment,
    make_provider,
)
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import StripeDouble


async def _provider_secret(app: RunningApp, name: str) -> str | None:
    async with app.state.sessions() as session:
        row = await get_provider(session, name)
        assert row is not None
        return (await resolve(row, app.state.vault, MetadataCache())).client_secret


async def test_provider_create_update_keeps_secret_write_only(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    name = f"p-{uuid.uuid4().hex[:10]}"
    body = {
        "name": name,
        "catalog": "oauth2",
        "client_id": PROVIDER_CLIENT,
        "client_secret": "first-secret",
        "issuer": oauth.issuer,
        "default_scopes": ["files:read"],
    }
    async with admin_http(elicitd, tokens["admin"]) as http:
        created = await http.post("/admin/v1/providers", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["client_secret_set"] is True
        assert "first-secret" not in created.text
        assert (await http.post("/admin/v1/providers", json=body)).json()["code"] == "provider_exists"
        missing = await http.post("/admin/v1/providers", json={**body, "name": name + "x", "client_secret": None})
        assert (missing.status_code, missing.json()["code"]) == (400, "invalid_provider")
        unknown = await http.post("/admin/v1/providers", json={**body, "name": name + "y", "password": "x"})
        assert unknown.status_code == 400
        assert await _provider_secret(elicitd, name) == "first-secret"
        renamed = await http.patch(f"/admin/v1/providers/{name}", json={"display_name": "Files"})
        assert (renamed.status_code, renamed.json()["display_name"]) == (200, "Files")
        assert await _provider_secret(elicitd, name) == "first-secret"  # not mentioned: kept
        rotated = await http.patch(f"/admin/v1/providers/{name}", json={"client_secret": "second-secret"})
        assert rotated.status_code == 200 and "second-secret" not in rotated.text
        assert await _provider_secret(elicitd, name) == "second-secret"
        assert (await http.patch("/admin/v1/providers/none-such", json={})).status_code == 404
        shown = (await http.get(f"/admin/v1/providers/{name}")).json()
        assert (shown["display_name"], shown["client_secret_set"], shown["issuer"]) == ("Files", True, oauth.issuer)


async def test_provider_discovery_test_reports_endpoints_or_the_failure(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    good = await make_provider(elicitd, oauth)
    bad = f"p-{uuid.uuid4().hex[:10]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        report = (await http.post(f"/admin/v1/providers/{good}/test-discovery")).json()
        assert report["ok"] is True
        assert report["authorization_endpoint"] == oauth.authorization_endpoint
        assert report["token_endpoint"] == oauth.token_endpoint
        assert report["revocation_endpoint"] == oauth.revocation_endpoint
        assert report["iss_parameter_supported"] is True
        created = await http.post(
            "/admin/v1/providers",
            json={
                "name": bad,
                "catalog": "oauth2",
                "client_id": "c",
                "client_secret": "s",
                "issuer": "http://127.0.0.1:9/nothing",
            },
        )
        assert created.status_code == 201
        failed = await http.post(f"/admin/v1/providers/{bad}/test-discovery")
    assert failed.status_code == 200
    assert failed.json()["ok"] is False
    assert failed.json()["error_code"] == "provider_discovery_failed"


async def test_issuer_create_update_and_discovery(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    url = f"https://id-{uuid.uuid4().hex[:10]}.example.com"
    async with admin_http(elicitd, tokens["admin"]) as http:
        created = await http.post(
            "/admin/v1/issuers", json={"issuer": url, "client_id": "login", "client_secret": "issuer-secret-1"}
        )
        assert created.status_code == 201, created.text
        assert created.json()["client_secret_set"] is True and "issuer-secret-1" not in created.text
        again = await http.post("/admin/v1/issuers", json={"issuer": url, "client_id": "login"})
        assert (again.status_code, again.json()["code"]) == (409, "issuer_exists")
        bad = await http.post("/admin/v1/issuers", json={"issuer": "http://id.example.com", "client_id": "x"})
        assert bad.status_code == 400
        updated = await http.patch("/admin/v1/issuers", json={"issuer": url, "display_name": "Corp ID"})
        assert (updated.status_code, updated.json()["display_name"]) == (200, "Corp ID")
        assert updated.json()["client_secret_set"] is True
        async with elicitd.state.sessions() as session:
            issuer_id = (await session.execute(text("SELECT id FROM issuers WHERE issuer = :i"), {"i": url})).scalar()
            row = (
                await session.execute(
                    text("SELECT client_secret_enc, client_secret_key_id FROM issuers WHERE id = :i"), {"i": issuer_id}
                )
            ).one()
        assert (
            elicitd.state.vault.decrypt_text(row[1], row[0], owner=str(issuer_id), purpose="issuer_client_secret")
            == "issuer-secret-1"
        )
        public = await http.patch("/admin/v1/issuers", json={"issuer": url, "client_secret": None})
        assert public.json()["client_secret_set"] is False
        report = (await http.post("/admin/v1/issuers/test-discovery", json={"issuer": oauth.issuer})).json()
        assert report["ok"] is True and report["jwks_uri"] == oauth.jwks_uri
        dead = f"http://127.0.0.1:9/{uuid.uuid4().hex[:8]}"  # a closed loopback port: fails fast, stays local
        assert (await http.post("/admin/v1/issuers", json={"issuer": dead, "client_id": "x"})).status_code == 201
        unreachable = (await http.post("/admin/v1/issuers/test-discovery", json={"issuer": dead})).json()
        assert (unreachable["ok"], unreachable["error_code"]) == (False, "issuer_unavailable")
        missing = await http.post("/admin/v1/issuers/test-discovery", json={"issuer": "https://none.example.com"})
        assert missing.status_code == 404


async def _metric(app: RunningApp, provider: str, outcome: str) -> float:
    async with app.http() as http:
        body = (await http.get("/metrics")).text
    line = f'elicitd_token_refreshes_total{{outcome="{outcome}",provider="{provider}"}}'
    values = [float(row.split()[-1]) for row in body.splitlines() if row.startswith(line)]
    return values[0] if values else 0.0


async def test_connection_force_refresh_and_revoke(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]
) -> None:
    provider = await make_provider(elicitd, oauth)
    connection = await make_connection(elicitd, oauth, provider)
    before = oauth.token_calls("refresh_token")
    async with admin_http(elicitd, tokens["operator"]) as http:
        listed = (await http.get("/admin/v1/connections", params={"provider": provider})).json()["items"]
        assert [(c["id"], c["has_refresh_token"]) for c in listed] == [(connection, True)]
        refreshed = await http.post(f"/admin/v1/connections/{connection}/refresh")
        assert refreshed.status_code == 200, refreshed.text
        assert refreshed.json()["refreshed_at"] is not None
        assert refreshed.json()["has_refresh_token"] is True
        assert oauth.token_calls("refresh_token") == before + 1
        assert await _metric(elicitd, provider, "refreshed") == 1.0
        # A provider that answers invalid_grant: reauthorization required, counted as such.
        oauth.fail_next_refresh("invalid_grant")
        failed = await http.post(f"/admin/v1/connections/{connection}/refresh")
        assert (failed.status_code, failed.json()["code"]) == (409, "reauthorization_required")
        assert await _metric(elicitd, provider, "reauthorization_required") == 1.0
        shown = (await http.get(f"/admin/v1/connections/{connection}")).json()
        assert shown["status"] == "reauthorization_required" and shown["has_refresh_token"] is False

        live = await make_connection(elicitd, oauth, provider)
        revocations = len(oauth.revocations())
        revoked = await http.post(f"/admin/v1/connections/{live}/revoke")
        assert revoked.status_code == 200
        assert revoked.json()["revoked"] is True and revoked.json()["revoked_at_provider"] is True
        assert revoked.json()["connection"]["status"] == "revoked"
        assert len(oauth.revocations()) == revocations + 1
        again = (await http.post(f"/admin/v1/connections/{live}/revoke")).json()
        assert (again["revoked"], again["revoked_at_provider"]) == (False, False)
        gone = await http.post(f"/admin/v1/connections/{live}/refresh")
        assert (gone.status_code, gone.json()["code"]) == (404, "not_connected")

        plain = await make_connection(elicitd, oauth, provider, with_refresh=False)
        no_refresh = await http.post(f"/admin/v1/connections/{plain}/refresh")
        assert (no_refresh.status_code, no_refresh.json()["code"]) == (409, "no_refresh_token")
        unknown = await http.post("/admin/v1/connections/cn_" + "0" * 32 + "/revoke")
        assert unknown.status_code == 404
    async with elicitd.state.sessions() as session:
        row = (
            await session.execute(
                text("SELECT access_token_enc, refresh_token_enc FROM connections WHERE id = :i"),
                {"i": uuid.UUID(live[3:])},
            )
        ).one()
    assert tuple(row) == (None, None)


async def test_payments_list_show_reconcile(
    elicitd: RunningApp, oauth: OAuthServer, stripe_double: StripeDouble, tokens: dict[str, Token]
) -> None:
    flow_ref = await make_payment(elicitd, oauth)
    session = stripe_double.session_for(flow_ref)
    async with admin_http(elicitd, tokens["operator"]) as http:
        listed = (await http.get("/admin/v1/payments", params={"status": "open", "limit": 500})).json()
        assert flow_ref in [p["flow_id"] for p in listed["items"]]
        shown = (await http.get(f"/admin/v1/payments/{flow_ref}")).json()
        assert (shown["payment"]["status"], shown["payment"]["session_id"]) == ("open", session["id"])
        assert "checkout_url" not in shown["payment"]
        still_open = (await http.post(f"/admin/v1/payments/{flow_ref}/reconcile")).json()
        assert still_open["outcome"] == "open"
        stripe_double.pay(session["id"])
        paid = await http.post(f"/admin/v1/payments/{flow_ref}/reconcile")
        assert paid.status_code == 200
        assert paid.json()["outcome"] == "completed"
        assert (paid.json()["payment"]["status"], paid.json()["payment"]["settled_by"]) == ("paid", "reconcile")
        flow = (await http.get(f"/admin/v1/flows/{flow_ref}")).json()["flow"]
        assert flow["status"] == "completed"
        twice = (await http.post(f"/admin/v1/payments/{flow_ref}/reconcile")).json()
        assert twice["outcome"] == "already_settled"
        missing = await http.get("/admin/v1/payments/fl_" + "0" * 32)
        assert (missing.status_code, missing.json()["code"]) == (404, "payment_not_found")
