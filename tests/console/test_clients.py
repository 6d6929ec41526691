"""Console pages for server clients, their webhook endpoints and deliveries, over HTTP: each action
does what the admin API's route does (checked through the API's own read), writes that route's
audit row, and is refused to the roles the API refuses; a secret is on its answer page only."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
from sqlalchemy import text

from service.admin.tokens import Role
from tests.admin.conftest import DEAD_HOOK, admin_http, complete_flow, create_flow, hooked_client, make_token
from tests.console.conftest import USERS, assert_same_audit_row, audit_rows
from tests.support.apps import RunningApp, new_server_client
from tests.support.oauth_server import OAuthServer

_SECRET = re.compile(r'id="secret" readonly value="([^"]+)"')
_POST_FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"')


def shown_secret(page: httpx.Response) -> str:
    found = _SECRET.search(page.text)
    assert found is not None, page.text
    return found.group(1)


def action_forms(page: httpx.Response) -> list[str]:
    """The POST forms a page offers, but the base's sign-out."""
    return [action for action in _POST_FORM.findall(page.text) if not action.startswith("/console/auth/")]


async def authenticates(app: RunningApp, api_key: str) -> bool:
    """Whether the key is accepted by the MCP-server API (a flow nobody has: 404 once in, 401 if not)."""
    async with app.http(api_key) as http:
        answer = await http.get(f"/v1/flows/fl_{uuid.uuid4().hex}")
    assert answer.status_code in {401, 404}, answer.text
    return answer.status_code == 404


async def api_view(app: RunningApp, client_id: str) -> dict[str, Any]:
    token = await make_token(app, "viewer")
    async with admin_http(app, token) as http:
        answer = await http.get(f"/admin/v1/server-clients/{client_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def last_row(app: RunningApp, operation: str, actor: str) -> dict[str, Any]:
    rows = [row for row in await audit_rows(app, operation) if row["actor"] == actor]
    assert rows, f"no {actor} row for {operation}"
    return rows[-1]


async def test_an_admin_registers_changes_and_disables_a_server_client(
    elicitd: RunningApp, oauth: OAuthServer, console: Any
) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    async with console(Role.ADMIN) as admin:
        form = await admin.get("/console/clients/new")
        assert form.status_code == 200 and 'action="/console/clients"' in form.text

        created = await admin.post(
            "/console/clients",
            {
                "name": name,
                "display_name": "Acme Files",
                "allowed_providers": "github\n google, ",
                "trusted_issuers": oauth.issuer,
                "subject_proof": "required",
                "resource_uris": "https://mcp.acme.example/mcp",
                "flows_per_minute": "30",
                "pending_per_subject": "",
            },
        )
        assert created.status_code == 200, created.text
        assert created.headers["cache-control"] == "no-store"
        key = shown_secret(created)
        assert await authenticates(elicitd, key)
        client_id = re.search(r'href="/console/clients/(sc_[0-9a-f]+)"', created.text).group(1)  # type: ignore[union-attr]
        view = await api_view(elicitd, client_id)
        assert (view["name"], view["display_name"], view["allowed_providers"], view["trusted_issuers"]) == (
            name,
            "Acme Files",
            ["github", "google"],
            [oauth.issuer],
        )
        assert (
            view["subject_proof"],
            view["resource_uris"],
            view["flows_per_minute"],
            view["pending_per_subject"],
        ) == (
            "required",
            ["https://mcp.acme.example/mcp"],
            30,
            None,
        )
        row = await last_row(elicitd, "adminCreateServerClient", "console")
        assert (row["method"], row["route"], row["target"], row["role"], row["status"]) == (
            "POST",
            "/admin/v1/server-clients",
            None,
            "admin",
            201,
        )
        assert row["detail"] == {"operator": {"iss": oauth.issuer, "sub": USERS[Role.ADMIN]}}

        # Never again: not on its page, not in the list, not on a second registration (409).
        detail = await admin.get(f"/console/clients/{client_id}")
        listing = await admin.get("/console/clients")
        again = await admin.post("/console/clients", {"name": name, "subject_proof": "required"})
        assert (detail.status_code, listing.status_code, again.status_code) == (200, 200, 409)
        for page in (detail, listing, again):
            assert key not in page.text
        assert key.split("_")[1] in detail.text  # its prefix tells it apart

        rotated = await admin.post(f"/console/clients/{client_id}/keys/rotate", {"grace_hours": "1"})
        assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
        new_key = shown_secret(rotated)
        assert new_key != key and await authenticates(elicitd, new_key) and await authenticates(elicitd, key)
        assert 'id="grace"' in rotated.text
        view = await api_view(elicitd, client_id)
        assert [k["active"] for k in view["keys"]] == [True, True] and view["keys"][0]["expires_at"] is not None
        assert new_key not in (await admin.get(f"/console/clients/{client_id}")).text
        too_long = await admin.post(f"/console/clients/{client_id}/keys/rotate", {"grace_hours": "721"})
        assert too_long.status_code == 400 and 'id="error"' in too_long.text

        changed = await admin.post(
            f"/console/clients/{client_id}/access", {"allowed_providers": "slack", "trusted_issuers": ""}
        )
        assert (changed.status_code, changed.headers["location"]) == (303, f"/console/clients/{client_id}?done=saved")
        view = await api_view(elicitd, client_id)
        assert (view["allowed_providers"], view["trusted_issuers"]) == (["slack"], [])

        # The weaker mode needs its box ticked; refused, nothing changes.
        unticked = await admin.post(
            f"/console/clients/{client_id}/subject-proof", {"subject_proof": "none", "resource_uris": ""}
        )
        assert unticked.status_code == 400 and 'id="weaker-warning"' in unticked.text
        assert (await api_view(elicitd, client_id))["subject_proof"] == "required"
        weakened = await admin.post(
            f"/console/clients/{client_id}/subject-proof",
            {"subject_proof": "none", "resource_uris": "", "confirm_weaker": "1"},
        )
        assert weakened.status_code == 303
        assert (await api_view(elicitd, client_id))["subject_proof"] == "none"
        warned = await admin.get(f"/console/clients/{client_id}")
        assert 'id="warning-subject_proof_not_required"' in warned.text

        bad = await admin.post(f"/console/clients/{client_id}/limits", {"flows_per_minute": "0"})
        assert bad.status_code == 400 and "flows_per_minute" in bad.text
        limited = await admin.post(
            f"/console/clients/{client_id}/limits", {"flows_per_minute": "", "pending_per_subject": "5"}
        )
        assert limited.status_code == 303
        view = await api_view(elicitd, client_id)
        assert (view["flows_per_minute"], view["pending_per_subject"]) == (None, 5)

        # Three forms, one API operation: the console's row is the API's PATCH row.
        token = await make_token(elicitd, "admin")
        async with admin_http(elicitd, token) as http:
            patched = await http.patch(f"/admin/v1/server-clients/{client_id}", json={"pending_per_subject": 6})
        assert patched.status_code == 200, patched.text
        console_rows = [r for r in await audit_rows(elicitd, "adminUpdateServerClient") if r["actor"] == "console"]
        assert [r["status"] for r in console_rows[-5:]] == [200, 400, 200, 400, 200]
        assert_same_audit_row(
            console_rows[-1], await last_row(elicitd, "adminUpdateServerClient", "api"), USERS[Role.ADMIN]
        )

        disabled = await admin.post(f"/console/clients/{client_id}/disable")
        assert disabled.status_code == 303 and (await api_view(elicitd, client_id))["disabled"] is True
        assert not await authenticates(elicitd, new_key)
        enabled = await admin.post(f"/console/clients/{client_id}/enable")
        assert enabled.status_code == 303 and (await api_view(elicitd, client_id))["disabled"] is False
        assert await authenticates(elicitd, new_key)

        missing = await admin.get("/console/clients/sc_00000000000000000000000000000000")
        assert missing.status_code == 404


async def test_an_admin_manages_a_webhook_endpoint(elicitd: RunningApp, console: Any) -> None:
    client = await new_server_client(elicitd)
    async with console(Role.ADMIN) as admin:
        refused = await admin.post(
            f"/console/clients/{client.public_id}/webhook-endpoints", {"url": "ftp://hooks.example.com/in"}
        )
        assert refused.status_code == 400 and "The webhook URL is not usable" in refused.text
        created = await admin.post(
            f"/console/clients/{client.public_id}/webhook-endpoints", {"url": DEAD_HOOK, "events": "flow.completed"}
        )
        assert created.status_code == 200 and created.headers["cache-control"] == "no-store"
        secret = shown_secret(created)
        assert secret.startswith("whsec_")
        endpoint_id = re.search(r'href="/console/webhook-endpoints/(we_[0-9a-f]+)"', created.text).group(1)  # type: ignore[union-attr]
        page = await admin.get(f"/console/webhook-endpoints/{endpoint_id}")
        assert page.status_code == 200 and secret not in page.text and DEAD_HOOK in page.text
        assert endpoint_id in (await admin.get(f"/console/clients/{client.public_id}")).text
        assert f'href="/console/webhook-endpoints/{endpoint_id}"' in (await admin.get("/console/clients")).text

        edited = await admin.post(
            f"/console/webhook-endpoints/{endpoint_id}/edit",
            {"url": "http://127.0.0.1:9/other", "events": ["flow.completed", "flow.expired"]},
        )
        assert edited.status_code == 303
        rotated = await admin.post(f"/console/webhook-endpoints/{endpoint_id}/rotate-secret", {"grace_hours": "2"})
        assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
        assert shown_secret(rotated) not in (secret, "")
        disabled = await admin.post(f"/console/webhook-endpoints/{endpoint_id}/disable")
        assert disabled.status_code == 303
        twice = await admin.post(f"/console/webhook-endpoints/{endpoint_id}/disable")
        assert twice.status_code == 409
        token = await make_token(elicitd, "viewer")
        async with admin_http(elicitd, token) as http:
            shown = (await http.get(f"/admin/v1/webhook-endpoints/{endpoint_id}")).json()
        assert (shown["url"], shown["events"], shown["state"]) == (
            "http://127.0.0.1:9/other",
            ["flow.completed", "flow.expired"],
            "disabled",
        )
        assert shown["previous_secret_until"] is not None
        assert (await admin.post(f"/console/webhook-endpoints/{endpoint_id}/enable")).status_code == 303
        deleted = await admin.post(f"/console/webhook-endpoints/{endpoint_id}/delete", {"confirm": "1"})
        assert (deleted.status_code, deleted.headers["location"]) == (
            303,
            f"/console/clients/{client.public_id}?done=endpoint_deleted",
        )
        assert (await admin.get(f"/console/webhook-endpoints/{endpoint_id}")).status_code == 404
        for operation, status in (
            ("adminCreateWebhookEndpoint", 201),
            ("adminUpdateWebhookEndpoint", 200),
            ("adminRotateWebhookEndpointSecret", 200),
            ("adminDisableWebhookEndpoint", 409),
            ("adminEnableWebhookEndpoint", 200),
            ("adminDeleteWebhookEndpoint", 204),
        ):
            row = await last_row(elicitd, operation, "console")
            assert (row["status"], row["role"]) == (status, "admin"), operation
        row = await last_row(elicitd, "adminDeleteWebhookEndpoint", "console")
        assert (row["method"], row["target"]) == ("DELETE", f"endpoint_id={endpoint_id}")


async def parked_delivery(app: RunningApp) -> tuple[str, str]:
    """A server client with one abandoned webhook delivery (the worker leaves it alone)."""
    client, _ = await hooked_client(app, DEAD_HOOK)
    flow_id = await create_flow(app, client)
    assert (await complete_flow(app, client, flow_id)).status_code == 200
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text(
                    "UPDATE webhook_outbox SET abandoned_at = now(), lease_until = NULL WHERE flow_id = :f RETURNING id"
                ),
                {"f": uuid.UUID(flow_id[3:])},
            )
        ).scalar_one()
        await session.commit()
    return client.public_id, "evt_" + row.hex


async def test_roles_are_the_admin_apis(elicitd: RunningApp, console: Any) -> None:
    """Viewers read and act on nothing; an operator replays but changes no client; the refusals
    are audited with the API's operation, as a refused API call is."""
    client_id, delivery = await parked_delivery(elicitd)
    async with admin_http(elicitd, await make_token(elicitd, "admin")) as http:
        made = await http.post(f"/admin/v1/server-clients/{client_id}/webhook-endpoints", json={"url": DEAD_HOOK})
    endpoint_id = made.json()["endpoint"]["id"]
    client_posts = [
        f"/console/clients/{client_id}/{action}"
        for action in ("keys/rotate", "disable", "enable", "access", "subject-proof", "limits", "webhook-endpoints")
    ]
    endpoint_posts = [
        f"/console/webhook-endpoints/{endpoint_id}/{action}"
        for action in ("edit", "rotate-secret", "enable", "disable", "delete")
    ]
    replay = f"/console/webhooks/{delivery}/replay"
    async with console(Role.VIEWER) as viewer:
        for path in (
            "/console/clients",
            f"/console/clients/{client_id}",
            f"/console/clients/{client_id}/deliveries",
            f"/console/webhook-endpoints/{endpoint_id}",
        ):
            page = await viewer.get(path)
            assert page.status_code == 200, path
            assert action_forms(page) == [], path
        assert (await viewer.get("/console/clients/new")).status_code == 403
        for path in ["/console/clients", *client_posts, *endpoint_posts, replay]:
            assert (await viewer.post(path, {"grace_hours": "1"})).status_code == 403, path
    async with console(Role.OPERATOR) as operator:
        page = await operator.get(f"/console/clients/{client_id}")
        assert action_forms(page) == [replay]
        for path in ["/console/clients", *client_posts, *endpoint_posts]:
            assert (await operator.post(path, {"grace_hours": "1"})).status_code == 403, path
        # In flight: refused (409) like the API; then replayed.
        async with elicitd.state.sessions() as session:
            await session.execute(
                text("UPDATE webhook_outbox SET lease_until = now() + interval '1 minute' WHERE id = :i"),
                {"i": uuid.UUID(delivery[4:])},
            )
            await session.commit()
        busy = await operator.post(replay)
        assert busy.status_code == 409 and 'id="error"' in busy.text
        async with elicitd.state.sessions() as session:
            await session.execute(
                text("UPDATE webhook_outbox SET lease_until = NULL WHERE id = :i"), {"i": uuid.UUID(delivery[4:])}
            )
            await session.commit()
        done = await operator.post(replay)
        assert (done.status_code, done.headers["location"]) == (
            303,
            f"/console/clients/{client_id}/deliveries?done=replayed",
        )
        listed = await operator.get(done.headers["location"])
        assert 'id="notice"' in listed.text and f'id="delivery-{delivery}"' in listed.text
    statuses = [
        (r["role"], r["status"])
        for r in await audit_rows(elicitd, "adminReplayWebhookDelivery")
        if r["target"] == f"delivery_id={delivery}"
    ]
    assert statuses == [("viewer", 403), ("operator", 409), ("operator", 200)]
    refused = [
        r for r in await audit_rows(elicitd, "adminDisableServerClient") if r["target"] == f"client_id={client_id}"
    ]
    assert [(r["actor"], r["role"], r["status"]) for r in refused] == [
        ("console", "viewer", 403),
        ("console", "operator", 403),
    ]
