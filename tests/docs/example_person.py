"""A person at the browser for the example server's README: ``webbrowser.open(url)`` runs this
(``BROWSER`` names a script that calls it), and it signs in at the test OAuth server as the issuer,
presses Continue on elicitd's page, and signs in again at the same server as the provider."""

from __future__ import annotations

import asyncio
import os
import sys

from tests.support.browser import chromium_session, login_at_issuer, new_context


async def connect(url: str, username: str) -> str:
    async with chromium_session() as browser:
        context = await new_context(browser)
        page = await context.new_page()
        await page.goto(url)
        await login_at_issuer(page, username)
        await page.locator("#connect-form").wait_for()
        async with page.expect_navigation():
            await page.click("#continue")
        await login_at_issuer(page, username)
        await page.locator("#outcome").wait_for()
        return await page.inner_text("#outcome")


if __name__ == "__main__":
    print("browser:", asyncio.run(connect(sys.argv[1], os.environ.get("EXAMPLE_PERSON", "alice"))), flush=True)
