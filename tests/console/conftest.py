"""The console's fixtures: one running elicitd whose operators sign in at a real OIDC server (the
Node test server in tests/support/oauth-server), a signed-in httpx client or Chromium page per
role, and helpers that seed what the pages show.

Roles come from the ID token's ``preferred_username`` claim (the test server sets it to the user
name typed on its login page): ``vera`` is a viewer, ``otto`` an operator, ``ada`` an admin, and
``nobody`` has no console role. Use::

    async def test_x(elicitd, console):               # httpx, signed in per role
        async with console(Role.OPERATOR) as http:    # a ConsoleClient
            page = await http.get("/console/flows")
            await http.post("/console/flows/fl_…/cancel", {"reason": "…"})  # csrf_token added

    async def test_y(elicitd, browser_page, signed_in_page):  # Chromium
        page = await signed_in_page(browser_page, Role.ADMIN)  # on /console/, signed in
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.admin.tokens import Role
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.operators.store import mark_issuer
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.axe import violations
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    login_at_issuer,
    pytest_runtest_makereport,
    save_screenshot,
)
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import API_KEY, WEBHOOK_SECRET, StripeDouble

CONSOLE_CLIENT_ID = "elicitd-console"
USERS = {Role.VIEWER: "vera", Role.OPERATOR: "otto", Role.ADMIN: "ada"}
NO_ROLE_USER = "nobody"
ROLES = tuple(USERS)
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="session")
def oauth() -> Iterator[OAuthServer]:
    """The operators' issuer (and, for seeded data, end users' issuer and the provider)."""
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="session")
def stripe_double() -> Iterator[StripeDouble]:
    with StripeDouble() as double:
        yield double


async def mark_operator_issuer(app: RunningApp, server: OAuthServer) -> None:
    """``server`` registered and marked for operator sign-in, roles from ``preferred_username``."""
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(issuer=server.issuer, client_id=CONSOLE_CLIENT_ID, display_name="Test ID"),
        )
        await mark_issuer(
            session,
            server.issuer,
            role_claim="preferred_username",
            roles={role: frozenset({user}) for role, user in USERS.items()},
        )
        await session.commit()
    app.state.issuers.forget()


@pytest.fixture(scope="session")
async def elicitd(
    make_settings: Callable[..., Settings], oauth: OAuthServer, stripe_double: StripeDouble
) -> AsyncIterator[RunningApp]:
    """The console tests' instance: payments against the local Stripe double, and the OAuth server
    as both the operators' issuer (marked) and a trusted issuer of end users."""
    settings = make_settings(
        stripe_secret_key=API_KEY, stripe_webhook_secret=WEBHOOK_SECRET, stripe_api_base=stripe_double.url
    )
    async with running_app(settings) as app:
        await mark_operator_issuer(app, oauth)
        # Every sign-in of every console test comes from 127.0.0.1 to this one instance: the
        # per-network limit (30 a minute) is tested where it belongs (tests/identity), not here.
        app.services.console.throttle.limit = 10_000
        yield app


@dataclass
class ConsoleClient:
    """An httpx client signed in to the console; ``post`` adds the session's CSRF token."""

    http: httpx.AsyncClient
    role: Role | None
    user: str
    csrf_token: str = field(repr=False, default="")

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        response = await self.http.get(path, **kwargs)
        self._learn(response)
        return response

    async def post(self, path: str, data: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        """A form POST as the page would send it (same-origin, with the CSRF token)."""
        body = {"csrf_token": self.csrf_token, **(data or {})}
        headers = {"Origin": str(self.http.base_url).rstrip("/"), **kwargs.pop("headers", {})}
        response = await self.http.post(path, data=body, headers=headers, **kwargs)
        self._learn(response)
        return response

    def _learn(self, response: httpx.Response) -> None:
        found = (
            _CSRF.search(response.text) if response.headers.get("content-type", "").startswith("text/html") else None
        )
        if found is not None:
            self.csrf_token = found.group(1)


async def sign_in_http(
    app: RunningApp, server: OAuthServer, user: str, *, return_to: str = "/console/", fresh: bool = False
) -> tuple[httpx.AsyncClient, httpx.Response]:
    """Sign ``user`` in through the real OIDC redirect (no browser); returns the client and the
    callback's answer (200 and the signed-in page, or the refusal page)."""
    http = httpx.AsyncClient(base_url=app.url, timeout=60)
    start = await http.get("/console/auth/login", params={"return_to": return_to, **({"fresh": "1"} if fresh else {})})
    assert start.status_code == 303, start.text
    callback = server.login_without_browser(start.headers["location"], user)
    answer = await http.get(str(callback))
    return http, answer


@pytest.fixture
def console(
    elicitd: RunningApp, oauth: OAuthServer
) -> Callable[..., contextlib.AbstractAsyncContextManager[ConsoleClient]]:
    """``async with console(Role.OPERATOR) as client``: a client signed in as that role's user."""

    @contextlib.asynccontextmanager
    async def signed_in(role: Role | None, *, user: str | None = None) -> AsyncIterator[ConsoleClient]:
        name = user or (NO_ROLE_USER if role is None else USERS[role])
        http, answer = await sign_in_http(elicitd, oauth, name)
        try:
            assert answer.status_code == (200 if role is not None else 403), answer.text
            client = ConsoleClient(http=http, role=role, user=name)
            if role is not None:
                home = await client.get("/console/")
                assert home.status_code == 200, home.text
            yield client
        finally:
            await http.aclose()

    return signed_in


@pytest.fixture
def signed_in_page(elicitd: RunningApp, oauth: OAuthServer) -> Callable[[Page, Role], Awaitable[Page]]:
    """``await signed_in_page(browser_page, Role.ADMIN)``: Chromium signed in, on the overview."""

    async def sign_in(page: Page, role: Role, *, return_to: str = "/console/") -> Page:
        await page.goto(f"{elicitd.url}{return_to}")
        assert "/console/signin" in page.url, page.url
        async with page.expect_navigation():
            await page.click("#sign-in")
        await login_at_issuer(page, USERS[role], issuer=oauth.issuer)
        await page.wait_for_url(re.compile(re.escape(elicitd.url + return_to.rstrip("/")) + r"/?(\?.*)?$"))
        return page

    return sign_in


async def age_sessions(app: RunningApp, user: str, *, seconds: int) -> None:
    """Make ``user``'s console sessions' last authentication ``seconds`` old (re-auth tests)."""
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE operator_sessions SET authenticated_at = now() - make_interval(secs => :s) WHERE sub = :sub"),
            {"s": seconds, "sub": user},
        )
        await session.commit()


async def audit_rows(app: RunningApp, operation: str, *, target: str | None = None) -> list[dict[str, Any]]:
    """The audit rows of ``operation`` (of ``target`` when given), oldest first, as dicts."""
    async with app.state.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT * FROM admin_audit_log WHERE operation = :op "
                    "AND (CAST(:target AS text) IS NULL OR target = :target) ORDER BY id"
                ),
                {"op": operation, "target": target},
            )
        ).mappings()
        return [dict(row) for row in rows]


# The columns a console action's row shares with the matching admin API call's row.
SAME_AS_API = ("operation", "method", "route", "target", "role", "status")


def assert_same_audit_row(console_row: dict[str, Any], api_row: dict[str, Any], operator: str) -> None:
    """The console's row equals the API's but for its actor and who acted (``detail.operator``)."""
    assert {k: console_row[k] for k in SAME_AS_API} == {k: api_row[k] for k in SAME_AS_API}
    assert console_row["actor"] == "console" and api_row["actor"] == "api"
    assert console_row["admin_token_id"] is None
    assert console_row["detail"]["operator"]["sub"] == operator


@dataclass
class Seeded:
    """What ``seeded`` made: a server client and its flows in several states (ids ``fl_…``)."""

    client: ServerClientHandle
    pending: list[str]
    completed: list[str]
    cancelled: list[str]
    failed: list[str]
    subject: str


@pytest.fixture(scope="session")
async def seeded(elicitd: RunningApp, oauth: OAuthServer) -> Seeded:
    """A server client with pending, completed, cancelled and failed ``external`` flows of one subject at
    the OAuth server, through the real API (seeded once per session; pages may find more)."""
    from tests.admin.conftest import admin_http, make_token

    client = await new_server_client(elicitd, display_name="Acme Assistant")
    subject = f"alice-{uuid.uuid4().hex[:6]}"
    made: dict[str, list[str]] = {"pending": [], "completed": [], "cancelled": [], "failed": []}
    admin = admin_http(elicitd, await make_token(elicitd, "operator"))
    async with elicitd.http(client.api_key) as http, admin:
        for state in ("pending", "pending", "completed", "completed", "completed", "cancelled", "failed"):
            body = {
                "subject": {"iss": oauth.issuer, "sub": subject},
                "kind": "external",
                "url": f"https://app.example.com/step/{uuid.uuid4().hex[:8]}",
            }
            response = await http.post("/v1/flows", json=body)
            assert response.status_code == 201, response.text
            flow_id = str(response.json()["flow"]["id"])
            if state == "completed":
                done = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
                assert done.status_code == 200, done.text
            elif state == "cancelled":
                gone = await admin.post(f"/admin/v1/flows/{flow_id}/cancel")
                assert gone.status_code == 200, gone.text
            elif state == "failed":
                failed = await http.post(
                    f"/v1/flows/{flow_id}/fail", json={"code": "tool_error", "message": "The tool gave up."}
                )
                assert failed.status_code == 200, failed.text
            made[state].append(flow_id)
    return Seeded(client=client, subject=subject, **made)


async def looked_at(page: Page, name: str) -> None:
    """axe-core finds nothing on the page; its screenshot is kept under tests/artifacts, and in
    ``ELICITD_SCREENSHOTS`` (docs/screenshots) when asked."""
    assert await violations(page) == [], page.url
    await save_screenshot(page, f"console-{name}")
    target = os.environ.get("ELICITD_SCREENSHOTS")
    if target:
        await page.screenshot(path=str(Path(target) / f"console-{name}.png"), full_page=True)
