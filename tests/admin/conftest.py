"""Admin fixtures: tokens per role (plus expired and revoked ones) on the shared instance, and
helpers that make flows, clients and webhook deliveries through the real API."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from service.admin.tokens import ADMIN_TOKEN_ID, Role, create_token, parse_lifetime
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client

# A closed loopback port: deliveries to it fail fast and never leave the machine.
DEAD_HOOK = "http://127.0.0.1:9/hook"


@dataclass
class Token:
    id: str
    secret: str
    role: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


async def make_token(app: RunningApp, role: str, *, expired: bool = False, revoked: bool = False) -> Token:
    async with app.state.sessions() as session:
        created = await create_token(session, name=f"test-{role}", role=Role.parse(role),
                                     lifetime=parse_lifetime("1h"))
        if expired:
            await session.execute(text("UPDATE admin_tokens SET expires_at = now() - interval '1 second' "
                                       "WHERE id = :id"), {"id": created.token.id})
        if revoked:
            await session.execute(text("UPDATE admin_tokens SET revoked_at = now() WHERE id = :id"),
                                  {"id": created.token.id})
        await session.commit()
    return Token(id=ADMIN_TOKEN_ID.format(created.token.id), secret=created.secret, role=role)


@pytest.fixture(scope="session")
async def tokens(elicitd: RunningApp) -> dict[str, Token]:
    return {
        "viewer": await make_token(elicitd, "viewer"),
        "operator": await make_token(elicitd, "operator"),
        "admin": await make_token(elicitd, "admin"),
        "expired": await make_token(elicitd, "admin", expired=True),
        "revoked": await make_token(elicitd, "admin", revoked=True),
    }


def admin_http(app: RunningApp, token: Token | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=app.url, headers=token.headers if token else {}, timeout=60)


def subject_body(sub: str | None = None, iss: str = "https://id.example.com") -> dict[str, Any]:
    return {"iss": iss, "sub": sub or f"user-{uuid.uuid4().hex[:10]}"}


async def create_flow(app: RunningApp, client: ServerClientHandle, *, sub: str | None = None,
                      iss: str = "https://id.example.com", tag: str | None = None) -> str:
    """A pending ``external`` flow; ``tag`` makes it distinct from the subject's other flows."""
    body = {"subject": subject_body(sub, iss), "kind": "external",
            "url": f"https://app.example.com/step/{tag or uuid.uuid4().hex[:8]}"}
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["flow"]["id"])


async def complete_flow(app: RunningApp, client: ServerClientHandle, flow_id: str,
                        result: dict[str, Any] | None = None) -> httpx.Response:
    async with app.http(client.api_key) as http:
        return await http.post(f"/v1/flows/{flow_id}/complete", json={"result": result or {"ok": True}})


async def hooked_client(app: RunningApp, url: str = DEAD_HOOK) -> tuple[ServerClientHandle, str]:
    """A server client with a webhook (returns the signing secret, shown once)."""
    client = await new_server_client(app)
    admin = await make_token(app, "admin")
    async with admin_http(app, admin) as http:
        response = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": url})
    assert response.status_code == 200, response.text
    return client, str(response.json()["webhook_secret"])
