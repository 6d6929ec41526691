"""The API-key form by keyboard alone, with a validation error: the error is announced
(``role=alert``), tied to the field it is about (``aria-invalid`` + ``aria-describedby``), the page
passes axe-core in English and in Thai, and a second, correct try by keyboard saves the key."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page

from tests.consent.helpers import create_flow, new_sub, open_as
from tests.support import axe
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.browser import new_context
from tests.support.oauth_server import OAuthServer

pytestmark = pytest.mark.browser


async def _tab_to(page: Page, element_id: str, limit: int = 12) -> None:
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} is not reachable with Tab")


async def test_api_key_form_with_a_validation_error_by_keyboard(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, chromium_browser: Browser
) -> None:
    sub = new_sub("kai")
    body = {"subject": {"iss": issuer.issuer, "sub": sub}, "kind": "api_key", "provider": provider}
    flow = (await create_flow(app, client, body))["flow"]
    for locale, too_short in (("en", "That is too short"), ("th", "สั้นเกินไป")):
        context = await new_context(chromium_browser, locale=locale)
        await axe.with_axe(context)
        page = await context.new_page()
        try:
            await open_as(page, flow["url"], sub, issuer)
            await page.locator("#api-key-form").wait_for()
            assert await page.locator("html").get_attribute("lang") == locale
            assert await axe.violations(page) == []
            await _tab_to(page, "secret")
            await page.keyboard.type("short")
            await _tab_to(page, "field_region", limit=2)
            await page.keyboard.press("ArrowDown")  # a keyboard choice in the select
            await _tab_to(page, "save")
            async with page.expect_navigation():
                await page.keyboard.press("Enter")
            error = page.locator("#error")
            assert await error.get_attribute("role") == "alert"
            assert (await error.inner_text()).startswith(too_short)
            secret = page.locator("#secret")
            assert await secret.get_attribute("aria-invalid") == "true"
            assert await secret.get_attribute("aria-describedby") == "error"
            assert await secret.input_value() == ""  # the entry is never sent back
            assert await axe.violations(page) == []
            if locale == "th":
                key = issuer.mint(sub)["access_token"]
                await _tab_to(page, "secret")
                await page.keyboard.type(key)
                await _tab_to(page, "save")
                async with page.expect_navigation():
                    await page.keyboard.press("Enter")
                assert await page.inner_text("#outcome") == "บันทึกแล้ว"
                assert await axe.violations(page) == []
        finally:
            await context.close()
