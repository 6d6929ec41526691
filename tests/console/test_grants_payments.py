"""Console pages for grants, trust groups and payments over HTTP: each action does what its admin
API route does, writes that route's audit row (compared with the API's own), and is refused to the
roles the API refuses."""

from __future__ import annotations

import uuid
from typing import Any

from service.admin.tokens import Role
from tests.admin.conftest import PROVIDER_CLIENT, admin_http, make_connection, make_payment, make_provider, make_token
from tests.console.conftest import USERS, assert_same_audit_row, audit_rows
from tests.console.test_clients import action_forms
from tests.support.apps import RunningApp, new_server_client
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import StripeDouble


async def granted_connection(app: RunningApp, oauth: OAuthServer) -> tuple[str, str]:
    """A connection (scopes ``files:read``) nobody holds a grant for yet, and a server client's name."""
    provider = await make_provider(app, oauth)
    minted = oauth.mint(f"u{uuid.uuid4().hex[:8]}", client_id=PROVIDER_CLIENT, scope="files:read")
    connection = await make_connection(
        app, oauth, provider, access_token=minted["access_token"], refresh_token=minted["refresh_token"]
    )
    client = await new_server_client(app, display_name="Rescued Assistant")
    return connection, client.name


async def test_grants_given_and_revoked_from_the_console_write_the_apis_rows(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    connection, client = await granted_connection(elicitd, oauth)
    async with console(Role.ADMIN) as admin:
        chosen = await admin.get("/console/grants/give", params={"connection_id": connection, "grantee": client})
        assert chosen.status_code == 200 and 'value="files:read"' in chosen.text
        assert action_forms(chosen) == [f"/console/connections/{connection}/grants/{client}"]
        given = await admin.post(f"/console/connections/{connection}/grants/{client}", {"scopes": "files:read"})
        assert given.status_code == 303, given.text
        grant_id = given.headers["location"].split("/")[-1].split("?")[0]
        page = await admin.get(given.headers["location"])
        assert "The grant is given." in page.text and "Rescued Assistant" in page.text
        wider = await admin.post(f"/console/connections/{connection}/grants/{client}", {"scopes": "files:write"})
        assert wider.status_code == 409 and "no_matching_authorization" in wider.text
        unknown = await admin.get("/console/grants/give", params={"connection_id": "cn_nope", "grantee": client})
        assert unknown.status_code == 404 and "connection_not_found" in unknown.text
    async with console(Role.VIEWER) as viewer:
        page = await viewer.get(f"/console/grants/{grant_id}")
        assert page.status_code == 200 and action_forms(page) == []
        assert (await viewer.get("/console/grants", params={"connection_id": connection})).status_code == 200
        assert (await viewer.post(f"/console/grants/{grant_id}/revoke")).status_code == 403
    async with console(Role.OPERATOR) as operator:
        listed = await operator.get("/console/grants", params={"connection_id": connection, "live": "1"})
        assert f"/console/grants/{grant_id}" in listed.text
        assert (await operator.get("/console/grants/give")).status_code == 403  # giving needs admin
        revoked = await operator.post(f"/console/grants/{grant_id}/revoke")
        assert (revoked.status_code, revoked.headers["location"]) == (303, f"/console/grants/{grant_id}?done=revoked")
        page = await operator.get(revoked.headers["location"])
        assert "Revoked" in page.text and action_forms(page) == []
        bad = await operator.get("/console/grants", params={"server_client": "no-such-client"})
        assert bad.status_code == 400 and "unknown_server_client" in bad.text
    async with admin_http(elicitd, await make_token(elicitd, "admin")) as api:
        again = await api.put(f"/admin/v1/connections/{connection}/grants/{client}", json={"scopes": ["files:read"]})
        assert again.status_code == 200
        assert (await api.post(f"/admin/v1/grants/{again.json()['id']}/revoke")).status_code == 200
        refused = await api.put(f"/admin/v1/connections/{connection}/grants/{client}", json={"scopes": ["files:write"]})
        assert refused.status_code == 409
    target = f"connection_id={connection},grantee={client}"
    gives = await audit_rows(elicitd, "adminGiveGrant", target=target)
    assert [(r["actor"], r["status"]) for r in gives] == [
        ("console", 200),
        ("console", 409),
        ("api", 200),
        ("api", 409),
    ]
    assert_same_audit_row(gives[0], gives[2], USERS[Role.ADMIN])
    assert_same_audit_row(gives[1], gives[3], USERS[Role.ADMIN])
    mine = await audit_rows(elicitd, "adminRevokeGrant", target=f"grant_id={grant_id}")
    assert [(r["actor"], r["role"], r["status"]) for r in mine] == [
        ("console", "viewer", 403),
        ("console", "operator", 200),
    ]


async def test_trust_groups_declared_changed_and_deleted(elicitd: RunningApp, console: Any) -> None:
    unproven = await new_server_client(elicitd, display_name="Files Assistant")  # no subject proof
    name = f"g{uuid.uuid4().hex[:8]}"
    async with console(Role.ADMIN) as admin:
        assert (await admin.get("/console/new/trust-group")).status_code == 200
        form = {"name": name, "display_name": "Example Corp", "members": unproven.name}
        refused = await admin.post("/console/trust-groups", form)
        assert refused.status_code == 409 and "unproven_member" in refused.text
        made = await admin.post("/console/trust-groups", {**form, "allow_unproven": "1"})
        assert made.status_code == 303, made.text
        group_path = made.headers["location"].split("?")[0]
        page = await admin.get(made.headers["location"])
        assert "The trust group is declared." in page.text and "Files Assistant" in page.text
        assert 'id="warning-unproven"' in page.text
        again = await admin.post("/console/trust-groups", {"name": name, "display_name": "Example Corp"})
        assert again.status_code == 409
        saved = await admin.post(group_path, {"display_name": "Example Corporation", "members": ""})  # and no box
        assert saved.status_code == 303
        listed = await admin.get("/console/trust-groups")
        assert "Example Corporation" in listed.text
        unknown = await admin.post(group_path, {"display_name": "X", "members": "no-such-client"})
        assert unknown.status_code == 400 and "unknown_server_client" in unknown.text
        assert (await admin.post(group_path + "/delete")).status_code == 303
        assert (await admin.get(group_path)).status_code == 404
    async with console(Role.OPERATOR) as operator:
        refused = await operator.post("/console/trust-groups", {"name": name + "x", "display_name": "Nope"})
        assert refused.status_code == 403
    group_id = group_path.rsplit("/", 1)[1]
    updates = await audit_rows(elicitd, "adminUpdateTrustGroup", target=f"group={group_id}")
    assert [r["status"] for r in updates] == [200, 400]
    deletes = await audit_rows(elicitd, "adminDeleteTrustGroup", target=f"group={group_id}")
    assert [(r["actor"], r["method"], r["route"], r["status"]) for r in deletes] == [
        ("console", "DELETE", "/admin/v1/trust-groups/{group}", 200)
    ]
    creates = [r for r in await audit_rows(elicitd, "adminCreateTrustGroup") if r["actor"] == "console"]
    assert [(r["role"], r["status"]) for r in creates[-4:]] == [
        ("admin", 409),
        ("admin", 201),
        ("admin", 409),
        ("operator", 403),
    ]


async def test_an_operator_reconciles_a_payment_and_the_row_is_the_apis(
    elicitd: RunningApp, oauth: OAuthServer, stripe_double: StripeDouble, console: Any
) -> None:
    flow_id = await make_payment(elicitd, oauth)
    async with console(Role.VIEWER) as viewer:
        listed = await viewer.get("/console/payments", params={"status": "open"})
        assert listed.status_code == 200 and f"/console/payments/{flow_id}" in listed.text
        page = await viewer.get(f"/console/payments/{flow_id}")
        assert page.status_code == 200 and action_forms(page) == [] and "Checkout open" in page.text
        assert "checkout.stripe" not in page.text and "/pay/" not in page.text  # never the checkout URL
    async with console(Role.OPERATOR) as operator:
        first = await operator.post(f"/console/payments/{flow_id}/reconcile")
        assert first.status_code == 200 and "The checkout is still open" in first.text
        stripe_double.pay(stripe_double.session_for(flow_id)["id"])  # paid, and its webhook lost
        paid = await operator.post(f"/console/payments/{flow_id}/reconcile")
        assert paid.status_code == 200 and "Paid: the flow is completed." in paid.text
        settled = await elicitd.state.flows.read(uuid.UUID(flow_id[3:]))
        assert settled is not None and settled.status == "completed"
        missing = await operator.post(f"/console/payments/fl_{uuid.uuid4().hex}/reconcile")
        assert missing.status_code == 404 and "payment_not_found" in missing.text
    async with admin_http(elicitd, await make_token(elicitd, "operator")) as api:
        assert (await api.post(f"/admin/v1/payments/{flow_id}/reconcile")).status_code == 200
    rows = await audit_rows(elicitd, "adminReconcilePayment", target=f"flow_id={flow_id}")
    assert [(r["actor"], r["status"]) for r in rows] == [("console", 200), ("console", 200), ("api", 200)]
    assert_same_audit_row(rows[1], rows[2], USERS[Role.OPERATOR])
