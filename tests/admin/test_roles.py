"""Every admin route x every kind of caller: each role may do exactly what it should.

The table must name every route of the admin router (checked against the OpenAPI schema), so a
new admin route cannot ship without its role being tested here."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from service.admin import endpoints
from service.branding import store as brands
from service.grants.groups import create_group
from service.grants.operators import give_grant
from service.identity.issuers import IssuerConfig, upsert_issuer
from tests.admin.conftest import (
    DEAD_HOOK,
    Token,
    admin_http,
    complete_flow,
    create_flow,
    hooked_client,
    make_connection,
    make_payment,
    make_provider,
)
from tests.support.apps import RunningApp, new_server_client
from tests.support.oauth_server import OAuthServer

ROLES = ["viewer", "operator", "admin"]
RANK = {"viewer": 1, "operator": 2, "admin": 3}


@dataclass
class World:
    app: RunningApp
    oauth: OAuthServer

    async def flow(self) -> str:
        return await create_flow(self.app, await new_server_client(self.app))

    async def client(self) -> str:
        return (await new_server_client(self.app)).public_id

    async def hooked(self) -> str:
        client, _ = await hooked_client(self.app)
        return client.public_id

    async def delivery(self) -> str:
        client, _ = await hooked_client(self.app)
        flow_id = await create_flow(self.app, client)
        assert (await complete_flow(self.app, client, flow_id)).status_code == 200
        async with self.app.state.sessions() as session:
            from sqlalchemy import text

            row: uuid.UUID = (
                await session.execute(
                    text("SELECT id FROM webhook_outbox WHERE flow_id = :f"), {"f": uuid.UUID(flow_id[3:])}
                )
            ).scalar_one()
        # Park it as abandoned so the worker leaves it alone and a replay is allowed.
        async with self.app.state.sessions() as session:
            await session.execute(
                text("UPDATE webhook_outbox SET abandoned_at = now(), lease_until = NULL WHERE id = :i"), {"i": row}
            )
            await session.commit()
        return "evt_" + row.hex

    async def provider(self) -> str:
        return await make_provider(self.app, self.oauth)

    async def known_issuer(self) -> str:
        """The OAuth server itself (its discovery answers); updated in place, never disabled."""
        return self.oauth.issuer

    async def issuer(self) -> str:
        url = f"https://id-{uuid.uuid4().hex[:10]}.example.com"
        async with self.app.state.sessions() as session:
            await upsert_issuer(session, self.app.state.vault, IssuerConfig(issuer=url, client_id="c"))
            await session.commit()
        return url

    async def connection(self) -> str:
        return await make_connection(self.app, self.oauth, await self.provider())

    async def payment(self) -> str:
        return await make_payment(self.app, self.oauth)

    async def reconnectable(self) -> str:
        """A connection a server client holds a grant on (so a reconnect flow can be started)."""
        connection, client = (await self.grantable()).split("|")
        async with self.app.state.sessions() as session:
            await give_grant(session, self.app.state.vault, connection, client, ["files:read"])
            await session.commit()
        return connection

    async def grantable(self) -> str:
        """A connection and a server client that may be given it: ``cn_…|sc_…``."""
        return f"{await self.connection()}|{await self.client()}"

    async def grant(self) -> str:
        connection, client = (await self.grantable()).split("|")
        async with self.app.state.sessions() as session:
            made = await give_grant(session, self.app.state.vault, connection, client, ["files:read"])
            await session.commit()
        return made.id

    async def group(self) -> str:
        async with self.app.state.sessions() as session:
            made = await create_group(session, f"g-{uuid.uuid4().hex[:10]}", "Example Corp")
            await session.commit()
        return made.name

    async def endpoint(self) -> str:
        client = await self.client()
        async with self.app.state.sessions() as session:
            made = await endpoints.create(
                session, self.app.state.vault, client, endpoints.CreateEndpoint(url=DEAD_HOOK)
            )
            await session.commit()
        return made.endpoint.id

    async def disabled_endpoint(self) -> str:
        endpoint = await self.endpoint()
        async with self.app.state.sessions() as session:
            await endpoints.disable(session, endpoint)
            await session.commit()
        return endpoint

    async def branded_client(self) -> str:
        return await self._branded(server_client=await self.client())

    async def branded_group(self) -> str:
        return await self._branded(trust_group=await self.group())

    async def _branded(self, **owner: str) -> str:
        async with self.app.state.sessions() as session:
            await brands.set_brand(session, await brands.owner_of(session, **owner), brands.BrandInput(tagline="Acme"))
            await session.commit()
        return next(iter(owner.values()))


Setup = Callable[[World], Awaitable[str]]


@dataclass
class Route:
    method: str
    template: str
    least: str
    ok: int
    setup: Setup | None = None
    body: Callable[[str | None], Any] | None = None
    query: dict[str, str] | None = None

    def path(self, target: str | None) -> str:
        """``{x}`` (and ``{y}``) filled from the setup's target (``x|y`` for two)."""
        template = self.template
        for name, value in zip(("{x}", "{y}"), (target or "").split("|"), strict=False):
            if target and name in template:
                template = template.replace(name, value)
        return "/admin/v1" + template


ROUTES = [
    Route("GET", "/flows", "viewer", 200),
    Route("GET", "/flows/{x}", "viewer", 200, World.flow),
    Route("POST", "/flows/{x}/cancel", "operator", 200, World.flow),
    Route("POST", "/flows/{x}/expire", "operator", 200, World.flow),
    Route("GET", "/server-clients", "viewer", 200),
    Route("POST", "/server-clients", "admin", 201, body=lambda _: {"name": f"r-{uuid.uuid4().hex[:10]}"}),
    Route("GET", "/server-clients/{x}", "viewer", 200, World.client),
    Route("PATCH", "/server-clients/{x}", "admin", 200, World.client, body=lambda _: {"flows_per_minute": 100}),
    Route("POST", "/server-clients/{x}/disable", "admin", 200, World.client),
    Route("POST", "/server-clients/{x}/enable", "admin", 200, World.client),
    Route("POST", "/server-clients/{x}/keys/rotate", "admin", 200, World.client, body=lambda _: {"grace_seconds": 60}),
    Route("PUT", "/server-clients/{x}/webhook", "admin", 200, World.client, body=lambda _: {"url": DEAD_HOOK}),
    Route("POST", "/server-clients/{x}/webhook/rotate-secret", "admin", 200, World.hooked),
    Route("GET", "/server-clients/{x}/webhook-endpoints", "viewer", 200, World.client),
    Route(
        "POST", "/server-clients/{x}/webhook-endpoints", "admin", 201, World.client, body=lambda _: {"url": DEAD_HOOK}
    ),
    Route("GET", "/webhook-endpoints/{x}", "viewer", 200, World.endpoint),
    Route("PATCH", "/webhook-endpoints/{x}", "admin", 200, World.endpoint, body=lambda _: {"events": ["flow.failed"]}),
    Route("DELETE", "/webhook-endpoints/{x}", "admin", 204, World.endpoint),
    Route(
        "POST",
        "/webhook-endpoints/{x}/rotate-secret",
        "admin",
        200,
        World.endpoint,
        body=lambda _: {"grace_seconds": 60},
    ),
    Route("POST", "/webhook-endpoints/{x}/enable", "admin", 200, World.disabled_endpoint),
    Route("POST", "/webhook-endpoints/{x}/disable", "admin", 200, World.endpoint),
    Route("GET", "/webhook-endpoints/{x}/attempts", "viewer", 200, World.endpoint),
    Route("GET", "/webhooks", "viewer", 200),
    Route("GET", "/webhooks/{x}", "viewer", 200, World.delivery),
    Route("POST", "/webhooks/{x}/replay", "operator", 200, World.delivery),
    Route("GET", "/stats", "viewer", 200),
    Route("GET", "/audit", "admin", 200),
    Route("GET", "/audit/verify", "admin", 200),
    Route("GET", "/audit/export", "admin", 200, query={"since": "2999-01-01T00:00:00Z"}),
    Route("GET", "/whoami", "viewer", 200),
    Route("GET", "/subjects", "viewer", 200, query={"iss": "https://id.example.com", "sub": "someone"}),
    Route("GET", "/providers", "viewer", 200),
    Route(
        "POST",
        "/providers",
        "admin",
        201,
        body=lambda _: {
            "name": f"p-{uuid.uuid4().hex[:10]}",
            "catalog": "oauth2",
            "client_id": "c",
            "client_secret": "s",
            "authorization_endpoint": "https://p.example.com/authorize",
            "token_endpoint": "https://p.example.com/token",
        },
    ),
    Route("GET", "/providers/{x}", "viewer", 200, World.provider),
    Route("PATCH", "/providers/{x}", "admin", 200, World.provider, body=lambda _: {"display_name": "Renamed"}),
    Route("POST", "/providers/{x}/disable", "admin", 200, World.provider),
    Route("POST", "/providers/{x}/enable", "admin", 200, World.provider),
    Route("POST", "/providers/{x}/test-discovery", "operator", 200, World.provider),
    Route("GET", "/issuers", "viewer", 200),
    Route(
        "POST",
        "/issuers",
        "admin",
        201,
        body=lambda _: {"issuer": f"https://id-{uuid.uuid4().hex[:10]}.example.com", "client_id": "c"},
    ),
    Route(
        "PATCH", "/issuers", "admin", 200, World.known_issuer, body=lambda t: {"issuer": t, "display_name": "Test ID"}
    ),
    Route("POST", "/issuers/disable", "admin", 200, World.issuer, body=lambda t: {"issuer": t}),
    Route("POST", "/issuers/enable", "admin", 200, World.issuer, body=lambda t: {"issuer": t}),
    Route("POST", "/issuers/test-discovery", "operator", 200, World.known_issuer, body=lambda t: {"issuer": t}),
    Route("GET", "/connections", "viewer", 200),
    Route("GET", "/connections/{x}", "viewer", 200, World.connection),
    Route("POST", "/connections/{x}/revoke", "operator", 200, World.connection),
    Route("POST", "/connections/{x}/refresh", "operator", 200, World.connection),
    Route("POST", "/connections/{x}/reconnect-link", "operator", 200, World.reconnectable),
    Route("GET", "/payments", "viewer", 200),
    Route("GET", "/payments/{x}", "viewer", 200, World.payment),
    Route("POST", "/payments/{x}/reconcile", "operator", 200, World.payment),
    Route("GET", "/grants", "viewer", 200),
    Route("GET", "/grants/{x}", "viewer", 200, World.grant),
    Route("POST", "/grants/{x}/revoke", "operator", 200, World.grant),
    Route(
        "PUT", "/connections/{x}/grants/{y}", "admin", 200, World.grantable, body=lambda _: {"scopes": ["files:read"]}
    ),
    Route("GET", "/trust-groups", "viewer", 200),
    Route(
        "POST",
        "/trust-groups",
        "admin",
        201,
        body=lambda _: {"name": f"g-{uuid.uuid4().hex[:10]}", "display_name": "Example Corp"},
    ),
    Route("GET", "/trust-groups/{x}", "viewer", 200, World.group),
    Route("PATCH", "/trust-groups/{x}", "admin", 200, World.group, body=lambda _: {"display_name": "Renamed"}),
    Route("DELETE", "/trust-groups/{x}", "admin", 200, World.group),
    Route("GET", "/server-clients/{x}/brand", "viewer", 200, World.branded_client),
    Route("PUT", "/server-clients/{x}/brand", "admin", 200, World.client, body=lambda _: {"accent": "#0b57d0"}),
    Route("DELETE", "/server-clients/{x}/brand", "admin", 200, World.branded_client),
    Route("GET", "/trust-groups/{x}/brand", "viewer", 200, World.branded_group),
    Route("PUT", "/trust-groups/{x}/brand", "admin", 200, World.group, body=lambda _: {"tagline": "Example Corp"}),
    Route("DELETE", "/trust-groups/{x}/brand", "admin", 200, World.branded_group),
]


def _id(route: Route) -> str:
    return f"{route.method} {route.template}"


async def _call(
    app: RunningApp, oauth: OAuthServer, route: Route, token: Token | None, *, raw_header: str | None = None
) -> int:
    target = await route.setup(World(app, oauth)) if route.setup else None
    kwargs: dict[str, Any] = {}
    if route.body is not None:
        kwargs["json"] = route.body(target)
    elif route.method in {"POST", "PUT", "PATCH"}:
        kwargs["json"] = {}
    if route.query is not None:
        kwargs["params"] = route.query
    async with admin_http(app, token) as http:
        headers = {"Authorization": raw_header} if raw_header is not None else {}
        response = await http.request(route.method, route.path(target), headers=headers, **kwargs)
    return response.status_code


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("route", ROUTES, ids=_id)
async def test_each_role_gets_exactly_its_rights(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token], route: Route, role: str
) -> None:
    status = await _call(elicitd, oauth, route, tokens[role])
    expected = route.ok if RANK[role] >= RANK[route.least] else 403
    assert status == expected


@pytest.mark.parametrize("caller", ["none", "garbage", "expired", "revoked", "api_key"])
@pytest.mark.parametrize("route", ROUTES, ids=_id)
async def test_unauthenticated_callers_get_401(
    elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token], route: Route, caller: str
) -> None:
    if caller == "none":
        status = await _call(elicitd, oauth, route, None)
    elif caller == "garbage":
        status = await _call(elicitd, oauth, route, None, raw_header="Bearer eat_0000_not-a-token")
    elif caller == "api_key":
        client = await new_server_client(elicitd)  # an MCP server's key is not an admin token
        status = await _call(elicitd, oauth, route, None, raw_header=f"Bearer {client.api_key}")
    else:
        status = await _call(elicitd, oauth, route, tokens[caller])
    assert status == 401


async def test_table_covers_every_admin_route(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    served = {
        (method.upper(), path.removeprefix("/admin/v1"))
        for path, item in schema["paths"].items()
        if path.startswith("/admin/v1")
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    tested = {(r.method, r.template.replace("{x}", "{*}").replace("{y}", "{*}")) for r in ROUTES}
    normalized = set()
    for method, path in served:
        parts = ["{*}" if p.startswith("{") else p for p in path.split("/")]
        normalized.add((method, "/".join(parts)))
    assert normalized == tested
    for path, item in schema["paths"].items():
        if path.startswith("/admin/v1"):
            for operation in item.values():
                if isinstance(operation, dict) and "operationId" in operation:
                    assert operation["operationId"].startswith("admin")
                    assert operation["tags"]
                    assert operation["security"] == [{"adminToken": []}]
