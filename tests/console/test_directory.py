"""Console pages for providers and issuers over HTTP: each action does what its admin API route does
(checked through the stored row), writes that route's audit row (compared with the API's own), is
refused to the roles the API refuses, and a client secret never comes back on any page."""

from __future__ import annotations

import uuid
from typing import Any

from service.admin.tokens import Role
from service.connections.discovery import MetadataCache
from service.connections.providers import get_provider, resolve
from tests.admin.conftest import admin_http, make_token
from tests.console.conftest import USERS, assert_same_audit_row, audit_rows
from tests.console.test_clients import action_forms, last_row
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer

DEAD = "http://127.0.0.1:9/nothing"  # a closed loopback port: discovery there fails at once


async def _stored_secret(app: RunningApp, name: str) -> str | None:
    async with app.state.sessions() as session:
        row = await get_provider(session, name)
        assert row is not None
        return (await resolve(row, app.state.vault, MetadataCache())).client_secret


def _provider_form(name: str, oauth: OAuthServer, secret: str, **extra: str) -> dict[str, str]:
    return {
        "name": name,
        "catalog": "oauth2",
        "client_id": "console-made",
        "client_secret": secret,
        "issuer": oauth.issuer,
        "default_scopes": "files:read\nfiles:write",
        "enabled": "1",
        **extra,
    }


async def test_an_admin_adds_changes_disables_a_provider_and_the_secret_never_shows(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    name, secret, rotated = f"cp-{uuid.uuid4().hex[:8]}", f"SECRET1{uuid.uuid4().hex}", f"SECRET2{uuid.uuid4().hex}"
    async with console(Role.ADMIN) as admin:
        form = await admin.get("/console/new/provider")
        assert form.status_code == 200 and 'type="password" id="client_secret"' in form.text
        made = await admin.post("/console/providers", _provider_form(name, oauth, secret))
        assert (made.status_code, made.headers["location"]) == (303, f"/console/providers/{name}?done=created")
        assert await _stored_secret(elicitd, name) == secret
        page = await admin.get(made.headers["location"])
        assert page.status_code == 200 and "The provider is added." in page.text
        assert secret not in page.text and 'value="SECRET' not in page.text

        again = await admin.post("/console/providers", _provider_form(name, oauth, secret))
        assert again.status_code == 409 and "provider_exists" in again.text
        assert secret not in again.text  # a refused form is shown again, without the secret typed into it
        bad = await admin.post("/console/providers", _provider_form(name + "x", oauth, secret, issuer="not a url"))
        assert bad.status_code == 400 and 'aria-invalid="true"' in bad.text

        shown = {"display_name": "Console Files", "client_id": "console-made", "issuer": oauth.issuer}
        shown["default_scopes"] = "files:read\nfiles:write"
        renamed = await admin.post(f"/console/providers/{name}", shown)
        assert renamed.status_code == 303
        assert await _stored_secret(elicitd, name) == secret  # an empty secret field keeps it
        changed = await admin.post(f"/console/providers/{name}", {**shown, "client_secret": rotated})
        assert changed.status_code == 303 and await _stored_secret(elicitd, name) == rotated
        page = await admin.get(f"/console/providers/{name}")
        assert "Console Files" in page.text and rotated not in page.text and secret not in page.text
        cleared = await admin.post(f"/console/providers/{name}", {**shown, "clear_client_secret": "1"})
        assert cleared.status_code == 400 and "invalid_provider" in cleared.text  # oauth2 needs one
        assert await _stored_secret(elicitd, name) == rotated

        off = await admin.post(f"/console/providers/{name}/disable")
        assert (off.status_code, off.headers["location"]) == (303, f"/console/providers/{name}?done=disabled")
        assert "Enable the provider" in (await admin.get(f"/console/providers/{name}")).text
        assert (await admin.post(f"/console/providers/{name}/enable")).status_code == 303
        missing = await admin.post("/console/providers/none-such/disable")
        assert missing.status_code == 404

    api_name = f"ap-{uuid.uuid4().hex[:8]}"
    async with admin_http(elicitd, await make_token(elicitd, "admin")) as api:
        body = {"name": api_name, "catalog": "oauth2", "client_id": "c", "client_secret": "s", "issuer": oauth.issuer}
        assert (await api.post("/admin/v1/providers", json=body)).status_code == 201
        assert (await api.post("/admin/v1/providers", json=body)).status_code == 409
        assert (await api.patch(f"/admin/v1/providers/{api_name}", json={"display_name": "X"})).status_code == 200
        assert (await api.post(f"/admin/v1/providers/{api_name}/disable")).status_code == 200
    rows = {op: await audit_rows(elicitd, op) for op in ("adminCreateProvider", "adminUpdateProvider")}
    created = [r for r in rows["adminCreateProvider"] if r["actor"] == "console"][-3:]
    api_created = [r for r in rows["adminCreateProvider"] if r["actor"] == "api"][-2:]
    assert [r["status"] for r in created] == [201, 409, 400]
    assert_same_audit_row(created[0], api_created[0], USERS[Role.ADMIN])
    assert_same_audit_row(created[1], api_created[1], USERS[Role.ADMIN])
    updated = [r for r in rows["adminUpdateProvider"] if r["target"] == f"name={name}"]
    assert [r["status"] for r in updated] == [200, 200, 400]
    api_updated = await last_row(elicitd, "adminUpdateProvider", "api")
    assert_same_audit_row(updated[0], {**api_updated, "target": f"name={name}"}, USERS[Role.ADMIN])
    disabled = await audit_rows(elicitd, "adminDisableProvider", target=f"name={name}")
    api_disabled = await audit_rows(elicitd, "adminDisableProvider", target=f"name={api_name}")
    assert_same_audit_row(disabled[0], {**api_disabled[0], "target": f"name={name}"}, USERS[Role.ADMIN])
    assert [r["status"] for r in await audit_rows(elicitd, "adminDisableProvider", target="name=none-such")] == [404]
    for row in created + updated:
        assert secret not in str(row) and rotated not in str(row)


async def test_test_discovery_shows_what_was_found_or_the_error(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    good, broken = f"cg-{uuid.uuid4().hex[:8]}", f"cb-{uuid.uuid4().hex[:8]}"
    async with console(Role.ADMIN) as admin:
        assert (await admin.post("/console/providers", _provider_form(good, oauth, "s1"))).status_code == 303
        dead = _provider_form(broken, oauth, "s2", issuer=DEAD)
        assert (await admin.post("/console/providers", dead)).status_code == 303
    async with console(Role.OPERATOR) as operator:
        page = await operator.get(f"/console/providers/{good}")
        assert action_forms(page) == [f"/console/providers/{good}/test-discovery"]  # no admin changes
        found = await operator.post(f"/console/providers/{good}/test-discovery")
        assert found.status_code == 200 and "Discovery works." in found.text
        assert oauth.authorization_endpoint in found.text and oauth.token_endpoint in found.text
        assert oauth.revocation_endpoint in found.text
        failed = await operator.post(f"/console/providers/{broken}/test-discovery")
        assert failed.status_code == 200 and "Discovery failed." in failed.text
        assert "provider_discovery_failed" in failed.text
        issuer = await operator.post("/console/issuers/test-discovery", {"issuer": oauth.issuer})
        assert issuer.status_code == 200 and "Discovery works." in issuer.text and oauth.jwks_uri in issuer.text
        refused = await operator.post(f"/console/providers/{good}/disable")
        assert refused.status_code == 403
    async with admin_http(elicitd, await make_token(elicitd, "operator")) as api:
        assert (await api.post(f"/admin/v1/providers/{good}/test-discovery")).status_code == 200
        assert (await api.post(f"/admin/v1/providers/{good}/disable")).status_code == 403
    tests = await audit_rows(elicitd, "adminTestProviderDiscovery", target=f"name={good}")
    assert [r["actor"] for r in tests] == ["console", "api"]
    assert_same_audit_row(tests[0], tests[1], USERS[Role.OPERATOR])
    refusals = await audit_rows(elicitd, "adminDisableProvider", target=f"name={good}")
    assert [(r["actor"], r["status"], r["role"]) for r in refusals] == [
        ("console", 403, "operator"),
        ("api", 403, "operator"),
    ]
    assert_same_audit_row(refusals[0], refusals[1], USERS[Role.OPERATOR])


async def test_an_admin_trusts_changes_and_disables_an_issuer(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    url, secret = f"https://id-{uuid.uuid4().hex[:8]}.example.com", f"ISSUERSECRET{uuid.uuid4().hex}"
    detail = "/console/issuers/detail?issuer=" + url.replace(":", "%3A").replace("/", "%2F")
    async with console(Role.ADMIN) as admin:
        listed = await admin.get("/console/issuers")
        assert listed.status_code == 200 and oauth.issuer in listed.text and "Operator sign-in" in listed.text
        made = await admin.post(
            "/console/issuers", {"issuer": url, "client_id": "login", "client_secret": secret, "enabled": "1"}
        )
        assert (made.status_code, made.headers["location"]) == (303, detail + "&done=issuer_created")
        page = await admin.get(made.headers["location"])
        assert page.status_code == 200 and "The issuer is trusted." in page.text and secret not in page.text
        again = await admin.post("/console/issuers", {"issuer": url, "client_id": "login"})
        assert again.status_code == 409 and "issuer_exists" in again.text
        saved = await admin.post(
            "/console/issuers/update", {"issuer": url, "display_name": "Corp ID", "client_id": "login"}
        )
        assert saved.status_code == 303
        page = await admin.get(detail)
        assert "Corp ID" in page.text and "Operators sign in to this console here." not in page.text
        assert (await admin.post("/console/issuers/disable", {"issuer": url})).status_code == 303
        assert "Enable the issuer" in (await admin.get(detail)).text
        assert (await admin.post("/console/issuers/enable", {"issuer": url})).status_code == 303
        bad = await admin.post("/console/issuers/disable", {"issuer": ""})
        assert bad.status_code == 400
        signin = await admin.get("/console/issuers/detail", params={"issuer": oauth.issuer})
        assert "Operators sign in to this console here." in signin.text
    async with console(Role.VIEWER) as viewer:
        page = await viewer.get(detail)
        assert page.status_code == 200 and action_forms(page) == []
        assert (await viewer.get("/console/new/issuer")).status_code == 403
    async with admin_http(elicitd, await make_token(elicitd, "admin")) as api:
        assert (await api.patch("/admin/v1/issuers", json={"issuer": url, "display_name": "Corp"})).status_code == 200
        assert (await api.post("/admin/v1/issuers/disable", json={"issuer": url})).status_code == 200
        assert (await api.post("/admin/v1/issuers/disable", json={"issuer": ""})).status_code == 400
    for operation, statuses in (("adminUpdateIssuer", [200]), ("adminDisableIssuer", [200, 400])):
        rows = (await audit_rows(elicitd, operation))[-2 * len(statuses) :]
        console_rows = [r for r in rows if r["actor"] == "console"]
        api_rows = [r for r in rows if r["actor"] == "api"]
        assert [r["status"] for r in console_rows] == statuses
        for mine, theirs in zip(console_rows, api_rows, strict=True):
            assert_same_audit_row(mine, theirs, USERS[Role.ADMIN])
    created = await last_row(elicitd, "adminCreateIssuer", "console")
    assert (created["status"], created["target"], created["route"]) == (409, None, "/admin/v1/issuers")
