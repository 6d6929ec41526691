"""Nothing secret in any admin response (planted markers), and the ``elicitd admin`` CLI end to end."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from typing import Any

from sqlalchemy import text

from service.db.base import CLIENT_ID
from service.identity.keys import hash_key
from tests.admin.conftest import (
    DEAD_HOOK,
    PROVIDER_CLIENT,
    Token,
    admin_http,
    answered_challenge,
    complete_flow,
    make_connection,
    make_payment,
    make_provider,
    make_token,
)
from tests.support.apps import RunningApp, new_server_client
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import API_KEY, StripeDouble
from tests.support.waiting import until

MARKER = "MARKER-" + uuid.uuid4().hex[:8]


async def test_no_secret_in_any_admin_response(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    admin = tokens["admin"]
    client = await new_server_client(elicitd)
    async with admin_http(elicitd, admin) as http:
        hook = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": DEAD_HOOK})
        one_time_secret = hook.json()["webhook_secret"]
    await answered_challenge(elicitd, client.id)
    # Plant secrets everywhere admin data comes from.
    webhook_secret = f"whsec_{MARKER}-webhook"
    key_id, blob = elicitd.state.vault.encrypt(
        webhook_secret, owner=CLIENT_ID.format(client.id), purpose="webhook_secret"
    )
    planted_key = f"elk_deadbeef_{MARKER}-apikey"
    async with elicitd.state.sessions() as session:
        await session.execute(
            text("UPDATE server_clients SET webhook_secret_enc = :b, webhook_secret_key_id = :k WHERE id = :i"),
            {"b": blob, "k": key_id, "i": client.id},
        )
        await session.execute(
            text(
                "INSERT INTO server_client_keys (id, server_client_id, key_hash, prefix) "
                "VALUES (gen_random_uuid(), :c, :h, 'deadbeef')"
            ),
            {"c": client.id, "h": hash_key(planted_key)},
        )
        await session.commit()
    body = {
        "subject": {"iss": "https://id.example.com", "sub": "u-secret"},
        "kind": "external",
        "url": "https://app.example.com/step/secret",
        "params": {"password": f"{MARKER}-params"},
    }
    async with elicitd.http(planted_key) as http:
        created = await http.post("/v1/flows", json=body)
    assert created.status_code == 201
    flow_id = created.json()["flow"]["id"]
    assert (await complete_flow(elicitd, client, flow_id, {"token": f"{MARKER}-result"})).status_code == 200
    delivery: uuid.UUID | None = None

    async def attempt_recorded() -> bool:
        # The failed attempt's status and error are shown by the admin API too: wait for them.
        nonlocal delivery
        async with elicitd.state.sessions() as session:
            delivery = (
                await session.execute(
                    text("SELECT id FROM webhook_outbox WHERE flow_id = :f AND attempts >= 1 AND lease_until IS NULL"),
                    {"f": uuid.UUID(flow_id[3:])},
                )
            ).scalar_one_or_none()
        return delivery is not None

    await until(attempt_recorded, what="a delivery attempt recorded")
    assert delivery is not None
    async with admin_http(elicitd, admin) as http:  # the webhook's endpoint (0018), with its attempt
        listed = await http.get(f"/admin/v1/server-clients/{client.public_id}/webhook-endpoints")
    endpoint = listed.json()["items"][0]["id"]
    calls = [
        ("GET", "/admin/v1/flows", None),
        ("GET", f"/admin/v1/flows/{flow_id}", None),
        ("GET", "/admin/v1/server-clients?limit=500", None),
        ("GET", f"/admin/v1/server-clients/{client.public_id}", None),
        ("PATCH", f"/admin/v1/server-clients/{client.public_id}", {"flows_per_minute": 1000}),
        ("PUT", f"/admin/v1/server-clients/{client.public_id}/webhook", {"url": DEAD_HOOK + "2"}),
        ("GET", "/admin/v1/webhooks", None),
        ("GET", f"/admin/v1/webhooks/evt_{delivery.hex}", None),
        ("GET", "/admin/v1/stats", None),
        ("GET", "/admin/v1/audit?limit=500", None),
        ("GET", "/admin/v1/audit/verify", None),
        ("GET", "/admin/v1/audit/export", None),  # every row, for a SIEM: the whole log, nothing secret
        ("GET", "/admin/v1/whoami", None),
        ("GET", f"/admin/v1/server-clients/{client.public_id}/webhook-endpoints", None),
        ("GET", f"/admin/v1/webhook-endpoints/{endpoint}", None),
        ("GET", f"/admin/v1/webhook-endpoints/{endpoint}/attempts", None),
        ("PATCH", f"/admin/v1/webhook-endpoints/{endpoint}", {"events": ["flow.completed"]}),
        ("POST", f"/admin/v1/server-clients/{client.public_id}/disable", None),
    ]
    forbidden = [
        MARKER,
        one_time_secret,
        admin.secret,
        client.api_key,
        base64.b64encode(blob).decode()[:24],
        blob.hex()[:24],
    ]
    async with admin_http(elicitd, admin) as http:
        for method, path, payload in calls:
            response = await http.request(method, path, json=payload)
            assert response.status_code == 200, (path, response.text)
            for secret in forbidden:
                assert secret not in response.text, (path, secret)


def _cli_env(database_url: str, redis_url: str) -> dict[str, str]:
    keys = "test2:" + "A" * 43 + ",test1:" + "B" * 43
    return {
        **os.environ,
        "ELICITD_DATABASE_URL": database_url,
        "ELICITD_REDIS_URL": redis_url,
        "ELICITD_KEYS": keys,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
    }


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "admin",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_cli_parity(elicitd: RunningApp, database_url: str, backend: Any) -> None:
    env = _cli_env(database_url, backend.redis_url)
    code, out, _ = await _cli(env, "tokens", "create", "--name", "cli-ops", "--role", "operator", "--json")
    assert code == 0
    made = json.loads(out)
    assert made["role"] == "operator"
    token = Token(id=made["id"], secret=made["token"], role="operator")
    async with admin_http(elicitd, token) as http:
        whoami = (await http.get("/admin/v1/whoami")).json()
    assert whoami == {"admin_token_id": made["id"], "name": "cli-ops", "role": "operator"}

    code, out, _ = await _cli(
        env, "clients", "create", f"cli-{uuid.uuid4().hex[:8]}", "--flows-per-minute", "7", "--subject-proof", "none"
    )
    assert code == 0
    assert "API key (shown once, store it now): elk_" in out
    api_key = out.split("store it now): ")[1].strip()
    client_id = next(word for word in out.split() if word.startswith("sc_"))
    async with elicitd.http(api_key) as http:
        created = await http.post(
            "/v1/flows",
            json={
                "subject": {"iss": "https://id.example.com", "sub": "cli"},
                "kind": "external",
                "url": "https://app.example.com/cli",
            },
        )
    flow_id = created.json()["flow"]["id"]

    code, out, _ = await _cli(env, "flows", "list", "--client", client_id)
    assert code == 0
    assert out.splitlines()[0].split() == [
        "ID",
        "KIND",
        "STATUS",
        "SERVER_CLIENT",
        "PROVIDER",
        "CREATED_AT",
        "EXPIRES_AT",
    ]
    assert flow_id in out
    # The CLI cancel wakes a waiter at once (Redis publish), like the API would.
    async with elicitd.http(api_key) as http:
        waiting = asyncio.create_task(http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 20}))
        code, out, _ = await _cli(env, "flows", "cancel", flow_id, "--json")
        assert code == 0
        assert json.loads(out)["status"] == "cancelled"
        assert (await waiting).json()["flow"]["status"] == "cancelled"
    code, _, err = await _cli(env, "flows", "cancel", flow_id)
    assert code == 1  # refused: the flow is already terminal
    assert "cannot change again" in err

    code, out, _ = await _cli(env, "clients", "set-webhook", client_id, DEAD_HOOK)
    assert "Webhook signing secret (shown once, store it now): whsec_" in out
    code, out, _ = await _cli(env, "clients", "show", client_id, "--json")
    shown = json.loads(out)
    assert shown["webhook_secret_set"] is True
    assert shown["flows_per_minute"] == 7
    assert "whsec_" not in out
    code, out, _ = await _cli(env, "stats", "--window", "1h", "--json")
    assert code == 0
    assert json.loads(out)["window_seconds"] == 3600
    code, out, _ = await _cli(env, "tokens", "revoke", made["id"])
    assert code == 0
    async with admin_http(elicitd, token) as http:
        assert (await http.get("/admin/v1/whoami")).status_code == 401
    admin = await make_token(elicitd, "admin")
    async with admin_http(elicitd, admin) as http:
        audit = (await http.get("/admin/v1/audit", params={"limit": 500})).json()["items"]
    cli_ops = [a["operation"] for a in audit if a["actor"] == "cli"]
    assert {"cliCreateAdminToken", "adminCancelFlow", "adminSetServerClientWebhook", "cliRevokeAdminToken"} <= set(
        cli_ops
    )


async def test_no_provider_issuer_or_token_secret_in_admin_responses(
    elicitd: RunningApp,
    oauth: OAuthServer,
    stripe_double: StripeDouble,
    tokens: dict[str, Token],
    database_url: str,
    backend: Any,
) -> None:
    marker = "MARKER-" + uuid.uuid4().hex[:8]
    provider_secret, issuer_secret = f"{marker}-provider-secret", f"{marker}-issuer-secret"
    access, refresh = f"{marker}-access-token", f"{marker}-refresh-token"
    name, issuer = f"p-{uuid.uuid4().hex[:10]}", f"https://id-{uuid.uuid4().hex[:10]}.example.com"
    provider_body = {
        "name": name,
        "catalog": "oauth2",
        "client_id": "c",
        "client_secret": provider_secret,
        "issuer": oauth.issuer,
    }
    async with admin_http(elicitd, tokens["admin"]) as http:
        responses = [
            await http.post("/admin/v1/providers", json=provider_body),
            await http.patch(f"/admin/v1/providers/{name}", json={"client_secret": provider_secret + "2"}),
            await http.post(
                "/admin/v1/issuers", json={"issuer": issuer, "client_id": "c", "client_secret": issuer_secret}
            ),
            await http.patch("/admin/v1/issuers", json={"issuer": issuer, "client_secret": issuer_secret + "2"}),
        ]
    # Tokens sealed into a connection by the connections service; a payment row beside them.
    connection = await make_connection(elicitd, oauth, name, access_token=access, refresh_token=refresh)
    payment = await make_payment(elicitd, oauth)
    async with admin_http(elicitd, tokens["admin"]) as http:
        for path in (
            "/admin/v1/providers",
            f"/admin/v1/providers/{name}",
            "/admin/v1/issuers",
            "/admin/v1/connections?limit=500",
            f"/admin/v1/connections/{connection}",
            "/admin/v1/payments?limit=500",
            f"/admin/v1/payments/{payment}",
            "/admin/v1/audit?limit=500",
        ):
            responses.append(await http.get(path))
        responses.append(await http.post(f"/admin/v1/providers/{name}/disable"))
        responses.append(await http.post(f"/admin/v1/providers/{name}/test-discovery"))
        responses.append(await http.post(f"/admin/v1/connections/{connection}/revoke"))
    for response in responses:
        assert response.status_code in {200, 201}, (response.url, response.text)
        assert marker not in response.text, response.url
    assert '"client_secret_set":true' in responses[0].text.replace(" ", "")

    env = _cli_env(database_url, backend.redis_url)
    second = await make_connection(
        elicitd, oauth, await make_provider(elicitd, oauth), access_token=access + "b", refresh_token=refresh + "b"
    )
    outputs = []
    for args in (
        ("providers", "list"),
        ("providers", "show", name),
        ("issuers", "list"),
        ("connections", "list", "--limit", "500"),
        ("connections", "show", second),
        ("payments", "show", payment),
        ("connections", "revoke", second),
    ):
        code, out, err = await _cli(env, *args, "--json")
        assert code == 0, (args, err)
        outputs.append(out)
        assert marker not in out + err, args
    assert json.loads(outputs[-1])["connection"]["status"] == "revoked"


async def test_cli_parity_providers_issuers_connections_payments(
    elicitd: RunningApp, oauth: OAuthServer, stripe_double: StripeDouble, database_url: str, backend: Any
) -> None:
    env = {
        **_cli_env(database_url, backend.redis_url),
        "PROVIDER_SECRET_FOR_TEST": "cli-provider-secret",
        "ELICITD_STRIPE_SECRET_KEY": API_KEY,
        "ELICITD_STRIPE_API_BASE": stripe_double.url,
    }
    name = f"p-{uuid.uuid4().hex[:10]}"
    code, out, err = await _cli(
        env,
        "providers",
        "create",
        name,
        "--catalog",
        "oauth2",
        "--client-id",
        PROVIDER_CLIENT,
        "--client-secret-env",
        "PROVIDER_SECRET_FOR_TEST",
        "--issuer",
        oauth.issuer,
        "--scope",
        "files:read",
    )
    assert code == 0, err
    assert out.splitlines()[0].split() == [
        "NAME",
        "DISPLAY_NAME",
        "CATALOG",
        "CLIENT_ID",
        "CLIENT_SECRET_SET",
        "ENABLED",
    ]
    assert name in out and "cli-provider-secret" not in out
    code, _, err = await _cli(
        env,
        "providers",
        "create",
        name,
        "--client-id",
        "x",
        "--issuer",
        oauth.issuer,
        "--client-secret-env",
        "PROVIDER_SECRET_FOR_TEST",
    )
    assert code == 1 and "exists" in err  # refused: a conflict
    code, out, _ = await _cli(env, "providers", "update", name, "--display-name", "CLI Files", "--json")
    assert json.loads(out)["display_name"] == "CLI Files" and json.loads(out)["client_secret_set"] is True
    code, out, _ = await _cli(env, "providers", "test-discovery", name, "--json")
    assert json.loads(out)["token_endpoint"] == oauth.token_endpoint
    code, out, _ = await _cli(env, "providers", "disable", name, "--json")
    assert json.loads(out)["enabled"] is False

    issuer = f"https://id-{uuid.uuid4().hex[:10]}.example.com"
    code, out, err = await _cli(env, "issuers", "create", issuer, "--client-id", "login", "--json")
    assert code == 0, err
    assert json.loads(out)["client_secret_set"] is False
    code, out, _ = await _cli(
        env,
        "issuers",
        "update",
        issuer,
        "--client-secret-env",
        "PROVIDER_SECRET_FOR_TEST",
        "--scope",
        "openid",
        "--scope",
        "email",
        "--json",
    )
    assert (json.loads(out)["client_secret_set"], json.loads(out)["scopes"]) == (True, ["openid", "email"])
    code, out, _ = await _cli(env, "issuers", "test-discovery", oauth.issuer, "--json")
    assert json.loads(out)["ok"] is True

    provider = await make_provider(elicitd, oauth)
    connection = await make_connection(elicitd, oauth, provider)
    code, out, err = await _cli(env, "connections", "refresh", connection, "--json")
    assert code == 0, err
    assert json.loads(out)["refreshed_at"] is not None
    code, out, _ = await _cli(env, "connections", "revoke", connection)
    assert out.splitlines()[0].split() == [
        "ID",
        "PROVIDER",
        "ACCOUNT_LOGIN",
        "STATUS",
        "REVOKED",
        "REVOKED_AT_PROVIDER",
    ]
    assert "revoked" in out.splitlines()[1]

    payment = await make_payment(elicitd, oauth)
    stripe_double.pay(stripe_double.session_for(payment)["id"])
    code, out, _ = await _cli(env, "payments", "list", "--status", "open", "--json")
    assert payment in [p["flow_id"] for p in json.loads(out)["items"]]
    code, out, _ = await _cli(env, "payments", "reconcile", payment, "--json")
    assert json.loads(out)["outcome"] == "completed"
    async with elicitd.http() as http:
        assert (await http.get("/metrics")).status_code == 200
    admin = await make_token(elicitd, "admin")
    async with admin_http(elicitd, admin) as http:
        audit = (await http.get("/admin/v1/audit", params={"limit": 500})).json()["items"]
    cli_ops = {a["operation"] for a in audit if a["actor"] == "cli"}
    assert {
        "adminCreateProvider",
        "adminUpdateIssuer",
        "adminRefreshConnection",
        "adminRevokeConnection",
        "adminReconcilePayment",
    } <= cli_ops
