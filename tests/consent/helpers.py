"""Shared by the consent, payment and API-key tests: an elicitd with the kinds configured and a
real issuer registered, flows created through the real API, and a browser login as a subject."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from playwright.async_api import Page
from sqlalchemy import text

from service.identity.issuers import IssuerConfig, upsert_issuer
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, running_app
from tests.support.browser import is_login_page, login_at_issuer
from tests.support.oauth_server import OAuthServer


@contextlib.asynccontextmanager
async def kinds_app(
    make_settings: Callable[..., Settings], issuer: OAuthServer, **overrides: Any
) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings(**overrides)) as app:
        await register_issuer(app, issuer)
        yield app


async def register_issuer(app: RunningApp, server: OAuthServer) -> None:
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(issuer=server.issuer, client_id="elicitd-test", display_name="Test ID"),
        )
        await session.commit()
    app.state.issuers.forget()


def new_sub(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def create_flow(
    app: RunningApp, client: ServerClientHandle, body: dict[str, Any], expect: int = 201
) -> dict[str, Any]:
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == expect, response.text
    created: dict[str, Any] = response.json()
    return created


async def open_as(page: Page, url: str, sub: str, issuer: OAuthServer) -> None:
    """Open a flow URL in the browser and log in at the issuer as ``sub`` when asked."""
    await page.goto(url)
    if await is_login_page(page):
        await login_at_issuer(page, sub, issuer=issuer.issuer)


async def flow_row(app: RunningApp, flow_ref: str) -> dict[str, Any]:
    async with app.state.sessions() as session:
        row = (
            await session.execute(
                text("SELECT status, result, error_code, expires_at FROM flows WHERE id = :id"),
                {"id": uuid.UUID(flow_ref[3:])},
            )
        ).first()
    assert row is not None
    return dict(row._mapping)


async def transitions(app: RunningApp, flow_ref: str) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, actor, to_status, detail FROM flow_events WHERE flow_id = :id AND type = 'transition' "
                "ORDER BY id"
            ),
            {"id": uuid.UUID(flow_ref[3:])},
        )
        return [dict(r._mapping) for r in rows]


async def event_types(app: RunningApp, flow_ref: str) -> list[str]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM flow_events WHERE flow_id = :id ORDER BY id"), {"id": uuid.UUID(flow_ref[3:])}
        )
        return [r[0] for r in rows]
