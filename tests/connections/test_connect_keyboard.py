"""The connect flow by keyboard alone, in Arabic, against a real instance and a real OAuth server:
the browser's ``Accept-Language: ar`` makes every elicitd page Arabic and right to left, the
connect and done pages pass axe-core, and Tab reaches *Continue* right after the skip link."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser

from tests.connections.conftest import Env, create_flow, new_sub
from tests.support import axe
from tests.support.apps import ServerClientHandle
from tests.support.browser import login_at_issuer, new_context

pytestmark = pytest.mark.browser


async def test_connect_provider_done_by_keyboard_in_arabic(
    env: Env, client: ServerClientHandle, chromium_browser: Browser
) -> None:
    sub = new_sub("amal")
    flow = (await create_flow(env, client, sub, scopes=["files:read"]))["flow"]
    context = await new_context(chromium_browser, locale="ar")
    await axe.with_axe(context)
    page = await context.new_page()
    try:
        await page.goto(flow["url"])
        await login_at_issuer(page, sub, issuer=env.iss)
        await page.locator("#connect-form").wait_for()
        html = page.locator("html")
        assert (await html.get_attribute("lang"), await html.get_attribute("dir")) == ("ar", "rtl")
        assert await page.inner_text("#continue") == "المتابعة إلى Test Files"
        assert await axe.violations(page) == []
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.id") == "skip"
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.id") == "continue"
        async with page.expect_navigation():
            await page.keyboard.press("Enter")
        assert page.url.startswith(env.oauth.url("/authorize"))
        await login_at_issuer(page, sub, issuer=env.iss)
        await page.locator("#outcome").wait_for()
        assert page.url == f"{env.app.url}/connect/done/{flow['id']}"
        assert await page.inner_text("#outcome") == "تم الربط"
        assert await page.locator("html").get_attribute("dir") == "rtl"
        assert await axe.violations(page) == []
        # The language links keep the page: English is one link away, and then remembered.
        await page.click("a[hreflang=en]")
        assert await page.inner_text("#outcome") == "Connected"
        await page.goto(f"{env.app.url}/connect/done/{flow['id']}")
        assert await page.locator("html").get_attribute("lang") == "en"
    finally:
        await context.close()
