"""Operator sign-in: roles from the issuer's claim, the console's own session, CSRF, re-auth."""

from __future__ import annotations

from service.admin.tokens import Role
from tests.console.conftest import USERS, sign_in_http
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer


async def test_each_role_signs_in_and_sees_its_name(elicitd: RunningApp, console: object) -> None:
    for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN):
        async with console(role) as client:  # type: ignore[operator]
            page = await client.get("/console/")
            assert page.status_code == 200
            assert USERS[role].capitalize() in page.text


async def test_an_account_without_a_role_gets_no_session(elicitd: RunningApp, oauth: OAuthServer) -> None:
    http, answer = await sign_in_http(elicitd, oauth, "nobody")
    try:
        assert answer.status_code == 403
        assert "no_console_role" in answer.text or "No access to the console" in answer.text
        assert not [c for c in http.cookies.jar if c.name == "elicitd_console"]
        home = await http.get("/console/")
        assert home.status_code == 303
        assert home.headers["location"] == "/console/signin?return_to=/console/"
    finally:
        await http.aclose()
