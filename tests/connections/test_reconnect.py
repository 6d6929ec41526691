"""Reconnecting from the person's side: ``/me`` shows each connection's health in words and, on a
broken or expiring one, a *Reconnect* button that opens that connection's reconnect flow (the
person's own sign-in still stands between anyone and it). Through Chromium on the real OAuth test
server: the button keeps the connection id and its grants and makes it healthy again."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page
from sqlalchemy import text

from service.connections.reconnect import NotReconnectable, start_reconnect
from service.db.base import CONNECTION_ID, FLOW_ID
from tests.connections.conftest import (
    Env,
    connection_rows,
    continue_to_provider,
    get_token,
    new_sub,
    plant_connection,
)
from tests.support import axe
from tests.support.apps import ServerClientHandle
from tests.support.browser import login_at_issuer, save_screenshot


def me_url(env: Env) -> str:
    from urllib.parse import quote

    return f"{env.app.url}/me?iss={quote(env.iss, safe='')}"


async def break_connection(env: Env, connection_ref: str, reason: str = "invalid_grant") -> None:
    """What a provider's refusal leaves (``health.needs_reauthorization_update``), written directly."""
    async with env.app.state.sessions() as session:
        cid = CONNECTION_ID.parse(connection_ref)
        await session.execute(
            text(
                "UPDATE authorizations SET status = 'reauthorization_required', health = 'needs_reauthorization', "
                "health_reason = :r, health_http_status = 400, access_token_enc = NULL, access_token_key_id = NULL, "
                "refresh_token_enc = NULL, refresh_token_key_id = NULL WHERE connection_id = :c"
            ),
            {"c": cid, "r": reason},
        )
        await session.execute(
            text(
                "UPDATE connections SET status = 'reauthorization_required', health = 'needs_reauthorization', "
                "health_reason = :r WHERE id = :c"
            ),
            {"c": cid, "r": reason},
        )
        await session.commit()


async def stream_kinds(env: Env, client: ServerClientHandle) -> list[str]:
    async with env.app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM events WHERE server_client_id = :c AND type LIKE 'connection.%' ORDER BY seq"),
            {"c": client.id},
        )
        return [r[0] for r in rows]


async def grants_of(env: Env, connection_ref: str) -> list[tuple[Any, ...]]:
    async with env.app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT id, server_client_id, authorization_id, scopes, revoked_at FROM grants "
                "WHERE connection_id = :c ORDER BY id"
            ),
            {"c": CONNECTION_ID.parse(connection_ref)},
        )
        return [tuple(r) for r in rows]


@pytest.mark.browser
async def test_me_reconnect_keeps_the_connection_and_its_grants(
    env: Env, client: ServerClientHandle, browser_page: Page
) -> None:
    page = browser_page
    sub = new_sub("me")
    ref, _ = await plant_connection(env, sub, granted_to=client)
    healthy_ref, _ = await plant_connection(env, new_sub("other"), granted_to=client)  # someone else's
    await break_connection(env, ref)
    grants_before = await grants_of(env, ref)
    (before,) = await connection_rows(env.app, sub)
    await axe.with_axe(page.context)

    await page.goto(me_url(env))
    await login_at_issuer(page, sub, issuer=env.iss)
    section = page.locator(f"#connection-{ref}")
    await section.wait_for()
    assert await page.locator(f"#connection-{healthy_ref}").count() == 0
    status = await page.inner_text(f"#connection-{ref}-status")
    assert status.splitlines() == [
        "Needs to be connected again",
        "Test Files no longer accepts this connection: it may have been removed there, or your password changed.",
    ]
    assert await axe.violations(page) == []
    shot = await save_screenshot(page, "me-reconnect")
    assert shot.is_file()

    async with page.expect_navigation():
        await page.click(f"#connection-{ref}-reconnect")
    await page.locator("#connect-form").wait_for()  # the connect page, signed in already as ``sub``
    await continue_to_provider(page, env)
    await login_at_issuer(page, sub, issuer=env.iss)  # at the provider, as the same account
    await page.locator("#outcome").wait_for()
    assert await page.inner_text("#outcome") == "Connected"

    (after,) = await connection_rows(env.app, sub)
    assert (after["id"], after["status"], after["health"], after["health_reason"]) == (
        before["id"],
        "active",
        "healthy",
        None,
    )
    assert await grants_of(env, ref) == grants_before
    assert await stream_kinds(env, client) == ["connection.recovered"]
    token = await get_token(env, client, sub)
    assert (token.status_code, token.json()["connection_id"]) == (200, ref)

    await page.goto(me_url(env))
    await section.wait_for()
    assert await page.inner_text(f"#connection-{ref}-status") == "Working"
    assert await page.locator(f"#connection-{ref}-reconnect").count() == 0


async def test_me_reconnect_acts_only_on_the_signed_in_persons_connection(
    env: Env, client: ServerClientHandle, browser_page: Page
) -> None:
    page = browser_page
    alice, bob = new_sub("alice"), new_sub("bob")
    alices, _ = await plant_connection(env, alice, granted_to=client)
    bobs, _ = await plant_connection(env, bob, granted_to=client)
    await break_connection(env, alices)
    await break_connection(env, bobs)
    await page.goto(me_url(env))
    await login_at_issuer(page, alice, issuer=env.iss)
    await page.locator(f"#connection-{alices}-reconnect").wait_for()
    csrf = await page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert csrf

    others = await page.request.post(
        f"{env.app.url}/me/connections/{bobs}/reconnect", form={"csrf_token": csrf}, max_redirects=0
    )
    forged = await page.request.post(
        f"{env.app.url}/me/connections/{alices}/reconnect", form={"csrf_token": "not-the-token"}, max_redirects=0
    )
    mine = await page.request.post(
        f"{env.app.url}/me/connections/{alices}/reconnect", form={"csrf_token": csrf}, max_redirects=0
    )

    assert (others.status, forged.status, mine.status) == (404, 403, 303)
    async with env.app.state.sessions() as session:
        flows = (
            await session.execute(
                text(
                    "SELECT id, subject_sub, connection_id FROM flows WHERE server_client_id = :c AND kind = 'oauth_connect'"
                ),
                {"c": client.id},
            )
        ).all()
    assert [(f[1], f[2]) for f in flows] == [(alice, CONNECTION_ID.parse(alices))]
    assert mine.headers["location"] == f"{env.app.url}/f/{FLOW_ID.format(flows[0][0])}"


async def test_a_connection_nobody_may_use_cannot_be_reconnected_from_here(env: Env) -> None:
    sub = new_sub("alone")
    ref, _ = await plant_connection(env, sub)  # granted to nobody
    services = env.app.state
    with pytest.raises(NotReconnectable):
        await start_reconnect(services.read_sessions, services.flows, ref, subject=(env.iss, sub))
    assert await start_reconnect(services.read_sessions, services.flows, ref, subject=(env.iss, "someone-else")) is None
    assert await start_reconnect(services.read_sessions, services.flows, "cn_nonsense") is None
