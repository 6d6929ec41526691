"""``elicitd admin mcp`` for real: the command runs as a process on its own database, operators'
access tokens come from the test OAuth server marked for operator sign-in, and the MCP SDK's own
client calls it over streamable HTTP.

One server serves the whole module (starting it costs a process and a migrated database); each
test makes the rows it reads, so the tests do not depend on their order.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from sqlalchemy import text

from service.admin.tokens import Role
from service.grants.operators import give_grant
from service.operators.store import clear_mark, mark_issuer
from service.settings import Settings
from tests.admin.conftest import (
    admin_http,
    complete_flow,
    create_flow,
    hooked_client,
    make_connection,
    make_provider,
    make_token,
)
from tests.faults.conftest import replica_env
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, free_port, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer

# A process and a migrated database of its own.
pytestmark = pytest.mark.slow

ROLES = {Role.VIEWER: "support", Role.OPERATOR: "oncall", Role.ADMIN: "platform"}
READS = {"find_flow", "explain_tool_failure", "list_stuck_webhooks"}
ACTS = {"replay_webhook", "revoke_grant"}
LEAK = f"LEAK{uuid.uuid4().hex[:12]}"


@dataclass
class AdminMcp:
    url: str  # the MCP endpoint
    app: RunningApp
    oauth: OAuthServer  # the operator issuer (and the provider of the test connections)
    log: Path
    answers: list[str]  # every tool answer's text, for the leak check

    def token(self, role: Role | None, *, sub: str | None = None, **options: Any) -> str:
        claims = options.pop("claims", {"groups": [ROLES[role]]} if role else {})
        audience = options.pop("audience", self.url)
        minted = self.oauth.mint(
            sub or f"op-{uuid.uuid4().hex[:8]}", format="jwt", audience=audience, claims=claims, **options
        )
        return str(minted["access_token"])


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def own_database(backend: backends.Backends) -> AsyncIterator[str]:
    """A database of the module's own: the operator sign-in mark is one per database."""
    from service.db.migrate import upgrade_async
    from service.settings import normalize_database_url

    url = await backends.create_database(backend.server_url)
    await upgrade_async(normalize_database_url(url))
    yield normalize_database_url(url)
    await backends.drop_database(backend.server_url, url)


@pytest.fixture(scope="module")
async def admin_mcp(
    make_settings: Callable[..., Settings],
    own_database: str,
    oauth: OAuthServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[AdminMcp]:
    async with running_app(make_settings(database_url=own_database)) as app:
        await register_issuer(app, oauth)
        async with app.state.sessions() as session:
            await mark_issuer(
                session, oauth.issuer, role_claim="groups", roles={r: frozenset({v}) for r, v in ROLES.items()}
            )
            await session.commit()
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        log = tmp_path_factory.mktemp("admin-mcp") / "admin-mcp.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "admin", "mcp", "--port", str(port)],
                env=command_env(app),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_ready(process, f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp", log)
            yield AdminMcp(url=url, app=app, oauth=oauth, log=log, answers=[])
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def command_env(app: RunningApp) -> dict[str, str]:
    """The environment of an ``elicitd`` command on ``app``'s database and Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update({**replica_env(app.settings), "ELICITD_PUBLIC_URL": app.url, "ELICITD_LOG_JSON": "true"})
    return env


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise AssertionError(f"elicitd admin mcp exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"elicitd admin mcp not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


@contextlib.asynccontextmanager
async def client(server: AdminMcp, bearer: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(server.url, http_client=http)) as mcp:
            yield mcp


async def call(server: AdminMcp, mcp: Client, tool: str, **arguments: Any) -> CallToolResult:
    result = await mcp.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    server.answers.extend(c.text for c in result.content if isinstance(c, TextContent))
    server.answers.append(json.dumps(result.structured_content))
    return result


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    found: dict[str, Any] = result.structured_content
    return found


async def audit_rows(app: RunningApp, target: str) -> list[tuple[Any, ...]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT actor, operation, method, route, target, status, role, admin_token_id IS NULL, detail "
                "FROM admin_audit_log WHERE target = :t ORDER BY id"
            ),
            {"t": target},
        )
        return [tuple(r) for r in rows]


async def abandoned_delivery(app: RunningApp) -> tuple[ServerClientHandle, str, str]:
    """A completion webhook that was given up on (so the worker leaves it alone), its flow and id."""
    hooked, _secret = await hooked_client(app)
    flow_id = await create_flow(app, hooked)
    assert (await complete_flow(app, hooked, flow_id)).status_code == 200
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text(
                    "UPDATE webhook_outbox SET abandoned_at = now(), lease_until = NULL, attempts = 3 "
                    "WHERE flow_id = :f RETURNING id"
                ),
                {"f": uuid.UUID(flow_id[3:])},
            )
        ).scalar_one()
        await session.commit()
    return hooked, flow_id, "evt_" + row.hex


async def park(app: RunningApp, delivery_id: str) -> None:
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE webhook_outbox SET abandoned_at = now(), lease_until = NULL WHERE id = :i"),
            {"i": uuid.UUID(delivery_id[4:])},
        )
        await session.commit()


async def abandoned(app: RunningApp, delivery_id: str) -> bool:
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT abandoned_at IS NOT NULL FROM webhook_outbox WHERE id = :i"), {"i": uuid.UUID(delivery_id[4:])}
        )
    return bool(found.scalar_one())


# ---- the tests ------------------------------------------------------------------------------------
async def test_tools_are_listed_per_role_and_the_metadata_names_the_operator_issuer(admin_mcp: AdminMcp) -> None:
    listed = {}
    for role in Role:
        async with client(admin_mcp, admin_mcp.token(role)) as mcp:
            listed[role] = {tool.name for tool in (await mcp.list_tools()).tools}
    assert listed == {Role.VIEWER: READS, Role.OPERATOR: READS | ACTS, Role.ADMIN: READS | ACTS}

    metadata = httpx.get(admin_mcp.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")).json()
    assert metadata["resource"] == admin_mcp.url
    assert metadata["authorization_servers"] == [admin_mcp.oauth.issuer]


async def test_a_viewer_is_refused_an_acting_tool_and_the_refusal_is_audited(admin_mcp: AdminMcp) -> None:
    app = admin_mcp.app
    _, _, delivery = await abandoned_delivery(app)
    async with client(admin_mcp, admin_mcp.token(Role.VIEWER, sub="vera")) as mcp:
        refused = await call(admin_mcp, mcp, "replay_webhook", delivery_id=delivery)
    assert refused.is_error
    assert refused.content == [TextContent(type="text", text="This tool needs the 'operator' role (forbidden).")]
    assert await abandoned(app, delivery)  # never queued again
    ((actor, operation, method, route, target, status, role, no_token, detail),) = await audit_rows(
        app, f"delivery_id={delivery}"
    )
    assert (actor, operation, method, route, target, status, role, no_token) == (
        "mcp",
        "adminReplayWebhookDelivery",
        "POST",
        "/admin/v1/webhooks/{delivery_id}/replay",
        f"delivery_id={delivery}",
        403,
        "viewer",
        True,
    )
    assert detail == {"operator": {"iss": admin_mcp.oauth.issuer, "sub": "vera"}}


async def test_an_operators_replay_writes_the_row_the_admin_api_writes(admin_mcp: AdminMcp) -> None:
    app = admin_mcp.app
    _, _, delivery = await abandoned_delivery(app)
    async with client(admin_mcp, admin_mcp.token(Role.OPERATOR, sub="otto")) as mcp:
        replayed = answer(await call(admin_mcp, mcp, "replay_webhook", delivery_id=delivery))
    assert replayed["delivery"]["id"] == delivery
    assert replayed["delivery"]["abandoned_at"] is None
    assert not await abandoned(app, delivery)
    await park(app, delivery)
    operator = await make_token(app, "operator")
    async with admin_http(app, operator) as http:
        assert (await http.post(f"/admin/v1/webhooks/{delivery}/replay")).status_code == 200
    by_mcp, by_api = await audit_rows(app, f"delivery_id={delivery}")
    assert by_mcp[:8] == ("mcp", *by_api[1:6], "operator", True)
    assert by_api[:8] == ("api", *by_mcp[1:6], "operator", False)
    assert by_mcp[5] == 200
    assert by_mcp[8]["operator"]["sub"] == "otto"


async def test_an_operator_revokes_a_grant_and_the_explanation_says_so(admin_mcp: AdminMcp) -> None:
    app, oauth = admin_mcp.app, admin_mcp.oauth
    provider = await make_provider(app, oauth)
    connection = await make_connection(
        app, oauth, provider, access_token=f"{LEAK}-access", refresh_token=f"{LEAK}-refresh"
    )
    grantee = await new_server_client(app)
    async with app.state.sessions() as session:
        grant = await give_grant(session, app.state.vault, connection, grantee.public_id, ["files:read"])
        subject = (
            await session.execute(
                text("SELECT subject_iss, subject_sub FROM connections WHERE id = :c"),
                {"c": uuid.UUID(connection[3:])},
            )
        ).one()
        await session.commit()
    ask = {
        "subject_iss": subject[0],
        "subject_sub": subject[1],
        "provider": provider,
        "server_client": grantee.public_id,
    }
    async with client(admin_mcp, admin_mcp.token(Role.OPERATOR)) as mcp:
        before = answer(await call(admin_mcp, mcp, "explain_tool_failure", **ask))
        revoked = answer(await call(admin_mcp, mcp, "revoke_grant", grant_id=grant.id))
        after = answer(await call(admin_mcp, mcp, "explain_tool_failure", **ask))
    assert [f["code"] for f in before["findings"]] == ["no_problem_found"]
    assert before["connections"][0]["granted_to_client"] == ["files:read"]
    assert revoked["id"] == grant.id
    assert revoked["revoked_at"] is not None
    assert [f["code"] for f in after["findings"]] == ["not_granted"]
    assert after["connections"][0]["connection"]["id"] == connection
    assert after["connections"][0]["granted_to_client"] is None
    assert [g["revoked_by"] for g in after["connections"][0]["grants"]] == ["admin"]
    (row,) = await audit_rows(app, f"grant_id={grant.id}")
    assert row[:8] == (
        "mcp",
        "adminRevokeGrant",
        "POST",
        "/admin/v1/grants/{grant_id}/revoke",
        f"grant_id={grant.id}",
        200,
        "operator",
        True,
    )
    async with admin_http(app, await make_token(app, "operator")) as http:
        assert (await http.post(f"/admin/v1/grants/{grant.id}/revoke")).status_code == 200
    _, by_api = await audit_rows(app, f"grant_id={grant.id}")
    assert by_api[1:6] == row[1:6]

    # A subject with nothing at all: the one finding says so.
    async with client(admin_mcp, admin_mcp.token(Role.VIEWER)) as mcp:
        nobody = answer(
            await call(admin_mcp, mcp, "explain_tool_failure", subject_iss=oauth.issuer, subject_sub="nobody-at-all")
        )
    assert [f["code"] for f in nobody["findings"]] == ["not_connected"]


async def test_a_revoke_whose_row_cannot_be_written_changes_nothing(admin_mcp: AdminMcp) -> None:
    """The row is written in the change's transaction: when the database refuses the row (a check
    constraint here), the revoke is rolled back with it and the caller reads an internal error."""
    app, oauth = admin_mcp.app, admin_mcp.oauth
    connection = await make_connection(app, oauth, await make_provider(app, oauth))
    grantee = await new_server_client(app)
    async with app.state.sessions() as session:
        grant = await give_grant(session, app.state.vault, connection, grantee.public_id, ["files:read"])
        await session.commit()
    name = f"test_refuse_{uuid.uuid4().hex[:8]}"
    async with app.state.sessions() as session:
        await session.execute(
            text(f"ALTER TABLE admin_audit_log ADD CONSTRAINT {name} CHECK (target <> 'grant_id={grant.id}') NOT VALID")
        )
        await session.commit()
    try:
        async with client(admin_mcp, admin_mcp.token(Role.OPERATOR)) as mcp:
            refused = await call(admin_mcp, mcp, "revoke_grant", grant_id=grant.id)
    finally:
        async with app.state.sessions() as session:
            await session.execute(text(f"ALTER TABLE admin_audit_log DROP CONSTRAINT {name}"))
            await session.commit()
    assert refused.is_error
    assert refused.content == [
        TextContent(
            type="text",
            text="Error executing tool revoke_grant: The tool failed on the server (internal_error); "
            "the server log says why.",
        )
    ]
    async with app.state.sessions() as session:
        revoked_at = (
            await session.execute(text("SELECT revoked_at FROM grants WHERE id = :g"), {"g": uuid.UUID(grant.id[3:])})
        ).scalar_one()
    assert revoked_at is None


async def test_reads_find_flows_and_stuck_webhooks(admin_mcp: AdminMcp) -> None:
    app = admin_mcp.app
    hooked, flow_id, delivery = await abandoned_delivery(app)
    # A second delivery of the same client, still waiting after two failed attempts.
    second = await create_flow(app, hooked)
    assert (await complete_flow(app, hooked, second)).status_code == 200
    async with app.state.sessions() as session:
        failing = (
            await session.execute(
                text(
                    "UPDATE webhook_outbox SET attempts = 2, last_status = 500, "
                    "next_attempt_at = now() + interval '1 hour', lease_until = NULL WHERE flow_id = :f RETURNING id"
                ),
                {"f": uuid.UUID(second[3:])},
            )
        ).scalar_one()
        await session.commit()
    async with client(admin_mcp, admin_mcp.token(Role.VIEWER)) as mcp:
        one = answer(await call(admin_mcp, mcp, "find_flow", flow_id=flow_id))
        some = answer(await call(admin_mcp, mcp, "find_flow", server_client=hooked.public_id, state="completed"))
        stuck = answer(await call(admin_mcp, mcp, "list_stuck_webhooks", server_client=hooked.public_id))
        unknown = await call(admin_mcp, mcp, "find_flow", flow_id="fl_" + "0" * 32)
    assert one["flow"]["id"] == flow_id
    assert [e["to_status"] for e in one["events"] if e["to_status"]] == ["pending", "completed"]
    assert [d["id"] for d in one["webhooks"]] == [delivery]
    assert [f["id"] for f in some["items"]] == [second, flow_id]
    assert [d["id"] for d in stuck["abandoned"]] == [delivery]
    assert [d["id"] for d in stuck["failing"]] == ["evt_" + failing.hex]
    assert stuck["failing"][0]["attempts"] >= 2
    assert stuck["backlog"] == 1
    assert unknown.is_error
    assert unknown.content == [
        TextContent(type="text", text="Error executing tool find_flow: No flow with this id. (flow_not_found)")
    ]
    rows = await audit_rows(app, f"flow_id={flow_id}")
    assert [(r[0], r[1], r[5], r[6]) for r in rows] == [("mcp", "adminGetFlow", 200, "viewer")]
    async with app.state.sessions() as session:
        counted = (
            await session.execute(
                text("SELECT operation, status FROM admin_audit_log WHERE actor = 'mcp' AND operation LIKE 'mcp%'")
            )
        ).all()
    assert ("mcpListStuckWebhooks", 200) in counted


@pytest.mark.parametrize(
    "case",
    ["another issuer", "another audience", "no role", "expired", "an id token", "no token"],
)
async def test_a_token_that_is_not_an_operators_for_this_server_is_refused(
    admin_mcp: AdminMcp, case: str, other_issuer: OAuthServer
) -> None:
    if case == "another issuer":
        bearer = other_issuer.mint("mallory", format="jwt", audience=admin_mcp.url, claims={"groups": ["platform"]})[
            "access_token"
        ]
    elif case == "another audience":
        bearer = admin_mcp.token(Role.ADMIN, audience="http://127.0.0.1:1/other")
    elif case == "no role":
        bearer = admin_mcp.token(None, claims={"groups": ["marketing"]})
    elif case == "expired":
        bearer = admin_mcp.token(Role.ADMIN, ttl=-120)
    elif case == "an id token":
        bearer = admin_mcp.oauth.mint("mallory", scope="openid", audience=admin_mcp.url)["id_token"]
    else:
        bearer = ""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    refused = httpx.post(admin_mcp.url, json=body, headers=headers)
    assert refused.status_code == 401
    assert refused.json()["error"] == "invalid_token"
    assert refused.headers["www-authenticate"].endswith(
        f'resource_metadata="{admin_mcp.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")}"'
    )
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's client gives up on a 401, however it says so
        async with client(admin_mcp, bearer or "x") as mcp:
            await mcp.list_tools()


@pytest.fixture(scope="module")
def other_issuer() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


async def test_without_a_marked_issuer_the_command_refuses_to_start(admin_mcp: AdminMcp) -> None:
    app = admin_mcp.app
    async with app.state.sessions() as session:
        assert await clear_mark(session)
        await session.commit()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "service.cli", "admin", "mcp", "--port", str(free_port())],
            env=command_env(app),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        async with app.state.sessions() as session:
            await mark_issuer(
                session,
                admin_mcp.oauth.issuer,
                role_claim="groups",
                roles={r: frozenset({v}) for r, v in ROLES.items()},
            )
            await session.commit()
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("elicitd: no issuer is marked for operator sign-in"), run.stderr


def test_no_answer_and_no_log_line_holds_a_secret(admin_mcp: AdminMcp) -> None:
    """Runs last in the module: every answer the tests above read, and the server's log."""
    assert len(admin_mcp.answers) > 10
    seen = "\n".join(admin_mcp.answers)
    assert LEAK not in seen
    for marker in ("eat_", "elk_", "whsec_", "eyJ"):  # admin tokens, API keys, webhook secrets, any JWT
        assert marker not in seen, marker
    log = admin_mcp.log.read_text()
    assert LEAK not in log
    assert "eyJ" not in log
