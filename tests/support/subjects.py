"""A world where users prove who they are: an identity provider that mints MCP access tokens, a
provider to connect, an elicitd that knows both, and a server client that must prove its users.

One real OAuth server process plays the users' issuer (browser login, JWT access tokens, RFC 7662
introspection) and the third-party provider, as in the connection tests. Users connect the provider
through the server client's own flow in Chromium, so the connection is one that client may use
(the connect page grants its creator) and a refused call really had a token to leak.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from playwright.async_api import Browser
from sqlalchemy import text

from service.identity.issuers import IssuerConfig, upsert_issuer
from service.identity.subject_proof import SUBJECT_TOKEN_HEADER
from tests.connections.conftest import Env, connect_in_browser, register_provider
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.browser import new_context
from tests.support.oauth_server import OAuthServer

RESOURCE = "https://files.example.com/mcp"
OTHER_RESOURCE = "https://other.example.com/mcp"
MCP_CLIENT = "files-mcp-client"
INTROSPECTION_CLIENT = "elicitd-introspection"
INTROSPECTION_SECRET = f"introspection-secret-{uuid.uuid4().hex}"


@dataclass
class World:
    app: RunningApp
    idp: OAuthServer
    provider: str
    client: ServerClientHandle
    # Each connected user's provider access token, as elicitd handed it out.
    provider_tokens: dict[str, str] = field(default_factory=dict)

    @property
    def iss(self) -> str:
        return self.idp.issuer

    @property
    def env(self) -> Env:
        return Env(app=self.app, oauth=self.idp, provider=self.provider)

    def user_token(
        self,
        sub: str,
        *,
        format: Literal["opaque", "jwt"] = "jwt",
        audience: str | list[str] | None = RESOURCE,
        ttl: int | None = None,
        iss: str | None = None,
        server: OAuthServer | None = None,
        typ: str | None = "at+jwt",
        expires: bool = True,
    ) -> str:
        """An access token the users' issuer (or ``server``) minted for ``sub``, as an MCP client holds."""
        minted = (server or self.idp).mint(
            sub,
            client_id=MCP_CLIENT,
            scope="files",
            audience=audience,
            format=format,
            ttl=ttl,
            iss=iss,
            typ=typ,
            expires=expires,
        )
        return str(minted["access_token"])


def proof(token: str | None) -> dict[str, str]:
    return {} if token is None else {SUBJECT_TOKEN_HEADER: token}


async def build_world(app: RunningApp, idp: OAuthServer) -> World:
    idp.register_client(INTROSPECTION_CLIENT, INTROSPECTION_SECRET)
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(
                issuer=idp.issuer,
                client_id="elicitd-login",
                display_name="Test ID",
                introspection_client_id=INTROSPECTION_CLIENT,
                introspection_client_secret=INTROSPECTION_SECRET,
            ),
        )
        await session.commit()
    app.state.issuers.forget()
    provider = f"files-{uuid.uuid4().hex[:8]}"
    await register_provider(app, idp, provider)
    # Trusting only this issuer also names the one issuer an opaque token is introspected at (the
    # shared test database holds other tests' introspecting issuers).
    client = await new_server_client(
        app,
        display_name="Acme Files Assistant",
        subject_proof="required",
        resource_uris=[RESOURCE],
        trusted_issuers=[idp.issuer],
    )
    return World(app=app, idp=idp, provider=provider, client=client)


async def connect(world: World, browser: Browser, sub: str, *, scopes: list[str] | None = None) -> str:
    """``sub`` connects the provider through the world's server client; returns the access token."""
    token = world.user_token(sub)
    body: dict[str, Any] = {"subject": {"iss": world.iss, "sub": sub}, "kind": "oauth_connect"}
    body.update(provider=world.provider, scopes=scopes or ["files:read"])
    async with world.app.http(world.client.api_key) as http:
        created = await http.post("/v1/flows", json=body, headers=proof(token))
        assert created.status_code == 201, created.text
        context = await new_context(browser)
        try:
            page = await context.new_page()
            await connect_in_browser(page, world.env, created.json()["flow"]["url"], sub)
        finally:
            await context.close()
        answer = await http.get(
            f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": sub}, headers=proof(token)
        )
    assert answer.status_code == 200, answer.text
    world.provider_tokens[sub] = answer.json()["access_token"]
    return world.provider_tokens[sub]


async def snapshot(app: RunningApp, subs: list[str]) -> dict[str, list[str]]:
    """Every flow, flow event and connection row of these subjects, as text: equal snapshots mean
    nothing was written for them."""
    queries = {
        "flows": "SELECT row_to_json(f)::text FROM flows f WHERE f.subject_sub = ANY(:subs) ORDER BY f.id",
        "events": "SELECT row_to_json(e)::text FROM flow_events e JOIN flows f ON f.id = e.flow_id "
        "WHERE f.subject_sub = ANY(:subs) ORDER BY e.id",
        "connections": "SELECT row_to_json(c)::text FROM connections c WHERE c.subject_sub = ANY(:subs) ORDER BY c.id",
    }
    async with app.state.sessions() as session:
        return {
            name: [str(row) for row in (await session.execute(text(sql), {"subs": subs})).scalars()]
            for name, sql in queries.items()
        }
