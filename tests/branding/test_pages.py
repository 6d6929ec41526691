"""A branded connect page in Chromium, against the real instance: the brand appears beside
elicitd's security elements, which keep the same text, markup and look; the page's
Content-Security-Policy is byte for byte the unbranded one; the logo and the accent come from
elicitd's origin; axe finds nothing in the light or the dark scheme.

With ``ELICITD_SCREENSHOTS=docs/screenshots`` the connect page in Thai, Arabic and Japanese,
unbranded and branded, is also written there (always to tests/artifacts/screenshots).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page

from service.admin.tokens import Role, create_token, parse_lifetime
from tests.branding import images
from tests.connections.conftest import Env, create_flow, new_sub, open_connect_page
from tests.support import axe
from tests.support.apps import ServerClientHandle, new_server_client
from tests.support.browser import new_context, save_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ACCENT = "#6a1b9a"
ACCENT_DARK = "#ce93d8"
# elicitd's fixed elements, as the page shows them: who asks, for which provider at which real
# domain, who is signed in, which page this is.
SECURITY = ("header.top > .brand", "header.top > .domain", "#connect-facts", "#client", "#provider", "footer.foot > p")
STYLE_PROPERTIES = ("color", "backgroundColor", "fontSize", "fontWeight", "display", "visibility", "opacity")


async def _admin(env: Env) -> httpx.AsyncClient:
    async with env.app.state.sessions() as session:
        made = await create_token(session, name="brand-pages", role=Role.ADMIN, lifetime=parse_lifetime("1h"))
        await session.commit()
    return httpx.AsyncClient(base_url=env.app.url, headers={"Authorization": f"Bearer {made.secret}"}, timeout=60)


async def _brand(env: Env, client: ServerClientHandle) -> dict[str, Any]:
    body = {
        "accent": ACCENT,
        "accent_dark": ACCENT_DARK,
        "logo_base64": base64.b64encode(images.wordmark()).decode(),
        "support_url": "https://help.acme.example/files",
        "tagline": "Acme Files — documents for your team",
    }
    async with await _admin(env) as http:
        made = await http.put(f"/admin/v1/server-clients/{client.public_id}/brand", json=body)
    assert made.status_code == 200, made.text
    result: dict[str, Any] = made.json()
    return result


async def _security(page: Page) -> dict[str, Any]:
    """Each security element's markup, and the computed look of it and of every element inside it."""
    found: dict[str, Any] = {}
    for selector in SECURITY:
        found[selector] = await page.locator(selector).evaluate(
            """(e, props) => [e.outerHTML, [e, ...e.querySelectorAll("*")].map(n => {
                const s = getComputedStyle(n);
                return [n.tagName, props.map(p => s[p]), n.getBoundingClientRect().width > 0];
            })]""",
            list(STYLE_PROPERTIES),
        )
    return found


async def _shot(page: Page, name: str) -> None:
    path = await save_screenshot(page, name)
    target = os.environ.get("ELICITD_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / f"{name}.png")


async def test_branded_connect_page_keeps_the_security_elements_and_the_policy(
    env: Env, chromium_browser: Browser
) -> None:
    client = await new_server_client(env.app, display_name="Acme Files Assistant")
    sub = new_sub("brand")
    flow = await create_flow(env, client, sub, scopes=["files:read"])
    url = flow["flow"]["url"]
    context = await new_context(chromium_browser, viewport={"width": 1280, "height": 900})
    await axe.with_axe(context)
    page = await context.new_page()
    try:
        await open_connect_page(page, env, url, sub)
        plain = await page.reload()
        assert plain is not None
        plain_security = await _security(page)
        assert await page.locator("#partner").count() == 0
        for tag in ("th", "ar", "ja"):
            await page.goto(f"{url}?lang={tag}")
            await _shot(page, f"10-connect-page-{tag}-unbranded")

        brand = await _brand(env, client)
        await page.goto(f"{url}?lang=en")
        branded = await page.reload()
        assert branded is not None
        # The policy is the unbranded page's, to the byte: the brand needs nothing from elsewhere.
        csp = plain.headers["content-security-policy"]
        assert branded.headers["content-security-policy"] == csp
        assert csp.startswith("default-src 'self'; ")
        assert await _security(page) == plain_security
        # The brand is there, beside them: logo from elicitd's origin (decoded), text, support link.
        logo = page.locator("#partner img")
        assert await logo.get_attribute("src") == brand["logo_url"]
        assert await logo.get_attribute("alt") == "Logo of Acme Files Assistant"
        assert await logo.evaluate("e => e.complete && e.naturalWidth") == 240
        assert await page.locator("#partner .tagline").inner_text() == "Acme Files — documents for your team"
        support = page.locator("#partner a")
        assert (await support.get_attribute("href"), await support.inner_text()) == (
            "https://help.acme.example/files",
            "Help from Acme Files Assistant",
        )
        assert await page.locator("head link[rel=stylesheet]").evaluate_all(
            "ls => ls.map(l => l.getAttribute('href'))"
        ) == [
            "/static/elicitd.css",
            brand["style_url"],
        ]
        # The accent reached the primary button, and only through the custom property.
        assert await page.locator("#continue").evaluate("e => getComputedStyle(e).backgroundColor") == (
            "rgb(106, 27, 154)"
        )
        assert await axe.violations(page) == []
        await page.set_viewport_size({"width": 320, "height": 900})
        assert await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.emulate_media(color_scheme="dark")
        assert await page.locator("#continue").evaluate("e => getComputedStyle(e).backgroundColor") == (
            "rgb(206, 147, 216)"
        )
        assert await axe.violations(page) == []
        await page.emulate_media(color_scheme="light")
        for tag in ("th", "ar", "ja"):
            await page.goto(f"{url}?lang={tag}")
            assert await axe.violations(page) == [], tag
            await _shot(page, f"10-connect-page-{tag}-branded")
        # Without a brand again, the page is the plain one.
        async with await _admin(env) as http:
            assert (await http.delete(f"/admin/v1/server-clients/{client.public_id}/brand")).status_code == 200
        await page.goto(f"{url}?lang=en")
        assert await page.locator("#partner").count() == 0
        assert await _security(page) == plain_security
    finally:
        await context.close()
