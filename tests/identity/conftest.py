"""Fixtures for the browser identity tests: an elicitd instance with a test kind page, its own
issuer (a real OIDC server process), and helpers to make flows and read their audit trail."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from litestar import Request, Response, post
from sqlalchemy import text

from service.db.base import FLOW_ID, uuid7
from service.flows import repository as repo
from service.flows.models import Flow
from service.flows.plugins import KindPlugin, MountedKind
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.services import Services
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    pytest_runtest_makereport,
)
from tests.support.oauth_server import OAuthServer, oauth_server_factory  # noqa: F401

TEST_KIND = "consent"


@pytest.fixture(scope="module")
def issuer_server() -> Iterator[OAuthServer]:
    """This module's own issuer: its URL is unique, so no other test's issuer row can interfere."""
    with OAuthServer() as server:
        yield server


async def whoami_page(request: Request[Any, Any, Any], flow: Flow, services: Services) -> Response[Any]:
    """A stand-in kind page: shows the verified identity and a CSRF-protected form."""
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    body = (
        f'<!doctype html><title>whoami</title><p id="who">{identity.iss} {identity.sub}</p>'
        f'<form id="act" method="post" action="/f/{FLOW_ID.format(flow.id)}/test-action">'
        f'<input type="hidden" name="csrf_token" value="{identity.csrf_token}">'
        f'<button id="go" type="submit">Go</button></form>'
    )
    return Response(body, media_type="text/html")


@post("/f/{flow_ref:str}/test-action", status_code=200)
async def test_action(request: Request[Any, Any, Any], flow_ref: str, services: Services) -> Response[Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await services.flows.read(flow_id)
    assert flow is not None
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    form = await request.form()
    submitted = form.get("csrf_token")
    services.gate.check_csrf(request, identity, submitted if isinstance(submitted, str) else None)
    return Response('<p id="done">accepted</p>', media_type="text/html")


def with_test_page(services: Services) -> Services:
    """The services with ``whoami_page`` as the page of ``TEST_KIND`` flows."""
    kinds = dict(services.kinds)
    plugin = KindPlugin(name=TEST_KIND, handler=kinds[TEST_KIND].plugin.handler, page=whoami_page)
    kinds[TEST_KIND] = MountedKind(plugin, services)
    return dataclasses.replace(services, kinds=kinds)


@pytest.fixture(scope="module")
async def identity_app(make_settings: Callable[..., Settings], issuer_server: OAuthServer) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings(), customize=with_test_page, routes=[test_action]) as app:
        await register_issuer(app, issuer_server)
        yield app


async def register_issuer(app: RunningApp, server: OAuthServer, **overrides: Any) -> uuid.UUID:
    values: dict[str, Any] = {"issuer": server.issuer, "client_id": "elicitd-test", "display_name": "Test ID"}
    values.update(overrides)
    async with app.state.sessions() as session:
        issuer_id = await upsert_issuer(session, app.state.vault, IssuerConfig(**values))
        await session.commit()
    app.state.issuers.forget()
    return issuer_id


@pytest.fixture
async def client(identity_app: RunningApp) -> ServerClientHandle:
    return await new_server_client(identity_app)


async def make_flow(app: RunningApp, client: ServerClientHandle, *, iss: str, sub: str, kind: str = TEST_KIND) -> Flow:
    async with app.state.flows.unit_of_work() as uow:
        flow = await repo.FlowStatements.insert_pending(
            uow.session,
            {
                "id": uuid7(),
                "server_client_id": client.id,
                "subject_iss": iss,
                "subject_sub": sub,
                "kind": kind,
                "reuse_key": uuid.uuid4().hex,
                "provider": None,
                "scopes": [],
                "params": {},
                "context": {},
                "message": "test",
                "external_url": None,
                "connection_id": None,
                "ttl_seconds": 900,
            },
        )
    assert flow is not None
    return flow


async def events(app: RunningApp, flow_id: uuid.UUID) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT type, actor, from_status, to_status, detail FROM flow_events WHERE flow_id = :f ORDER BY id"),
            {"f": flow_id},
        )
        return [dict(r._mapping) for r in rows]


async def sessions_for(app: RunningApp, iss: str) -> int:
    async with app.state.sessions() as session:
        return int(
            (
                await session.execute(text("SELECT count(*) FROM browser_sessions WHERE iss = :i"), {"i": iss})
            ).scalar_one()
        )


def new_sub(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"
