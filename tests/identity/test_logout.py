"""Logout is a change of state like any other: only this site's own form may make it, with a live
session and that session's CSRF token. Anything else is 403 ``csrf_failed`` and changes nothing:
no session ends, no cookie is cleared, and no sign-in of another site's choosing starts."""

from __future__ import annotations

import httpx
import pytest

from service.db.base import FLOW_ID
from service.identity import sessions as store
from service.signin.csrf import csrf_token_for
from tests.identity.conftest import make_flow, new_sub
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer


async def signed_in(app: RunningApp, server: OAuthServer) -> tuple[str, str]:
    """A live browser session at ``server`` (as a completed login leaves it): cookie value and CSRF token."""
    resolved = await app.state.issuers.resolve(server.issuer)
    assert resolved is not None
    async with app.state.sessions() as session:
        token = await store.create_browser_session(
            session, issuer_id=resolved.id, iss=server.issuer, sub=new_sub("alice"), lifetime=600
        )
        row = await store.touch_session(session, token)
        await session.commit()
    assert row is not None
    return token, csrf_token_for(row)


async def alive(app: RunningApp, token: str) -> bool:
    async with app.state.sessions() as session:
        return await store.touch_session(session, token) is not None


async def logout(
    app: RunningApp, *, cookie: str | None, form: dict[str, str], origin: str | None = None
) -> httpx.Response:
    headers = {"Origin": origin} if origin else {}
    cookies = {store.SESSION_COOKIE: cookie} if cookie else {}
    async with app.http(cookies=cookies) as http:
        return await http.post("/auth/logout", data=form, headers=headers)


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 403
    assert "location" not in response.headers
    assert "set-cookie" not in response.headers
    assert "This form has expired" in response.text


async def test_a_cross_site_post_without_a_session_starts_nothing(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    """The attack: another site posts to /auth/logout (SameSite=Lax keeps the session cookie
    home) with ``return_to`` naming a flow of its choice, to push the person into a fresh sign-in."""
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("bob"))
    form = {"return_to": f"/f/{FLOW_ID.format(flow.id)}", "csrf_token": "anything"}
    assert_refused(await logout(identity_app, cookie=None, form=form, origin="https://evil.example"))
    assert_refused(await logout(identity_app, cookie=None, form=form))


@pytest.mark.parametrize(
    ("csrf", "origin"),
    [(None, None), ("forged", None), ("", None), ("REAL", "https://evil.example")],
)
async def test_a_live_session_is_ended_only_by_its_own_form(
    identity_app: RunningApp, issuer_server: OAuthServer, csrf: str | None, origin: str | None
) -> None:
    token, real = await signed_in(identity_app, issuer_server)
    form = {} if csrf is None else {"csrf_token": real if csrf == "REAL" else csrf}
    assert_refused(await logout(identity_app, cookie=token, form=form, origin=origin))
    assert await alive(identity_app, token)


async def test_a_dead_session_cannot_be_used_to_log_out(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    token, real = await signed_in(identity_app, issuer_server)
    async with identity_app.state.sessions() as session:
        await store.delete_session(session, token)
        await session.commit()
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("carol"))
    form = {"csrf_token": real, "return_to": f"/f/{FLOW_ID.format(flow.id)}"}
    assert_refused(await logout(identity_app, cookie=token, form=form))


async def test_the_own_form_logs_out_and_may_switch_account(
    identity_app: RunningApp, issuer_server: OAuthServer, client: ServerClientHandle
) -> None:
    token, real = await signed_in(identity_app, issuer_server)
    flow = await make_flow(identity_app, client, iss=issuer_server.issuer, sub=new_sub("dave"))
    path = f"/f/{FLOW_ID.format(flow.id)}"
    response = await logout(
        identity_app, cookie=token, form={"csrf_token": real, "return_to": path}, origin=identity_app.url
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"/auth/login?return_to={path}&switch=true"
    assert not await alive(identity_app, token)
    plain_token, plain_csrf = await signed_in(identity_app, issuer_server)
    plain = await logout(identity_app, cookie=plain_token, form={"csrf_token": plain_csrf}, origin="null")
    assert plain.status_code == 200
    assert "Signed out" in plain.text
    assert not await alive(identity_app, plain_token)
