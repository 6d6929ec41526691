"""The person at the keyboard, played by headless Chromium (``make demo HEADLESS=1``).

It does what the demo asks a person to do: open the link, sign in at Dev ID, press *Continue* on
elicitd's page and *Allow* at Demo Files, then read the page that says the account is connected.
With a screenshot directory it saves each page on the way, and finally the host's transcript.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from playwright.async_api import Browser, Page, Playwright, async_playwright

# The distribution's Chromium, never a browser downloaded by Playwright.
CHROMIUM = os.environ.get("ELICITD_CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
TIMEOUT_MS = 20_000

SHOTS = {
    "sign-in": "1-dev-id-sign-in.png",
    "connect": "2-elicitd-connect.png",
    "consent": "3-demo-files-consent.png",
    "done": "4-elicitd-connected.png",
    "answer": "5-tool-answer.png",
}


class ChromiumMissing(RuntimeError):
    pass


class HeadlessPerson:
    """One Chromium page, driven through the connect story; ``async with`` starts and stops it."""

    def __init__(self, user: str, screenshots: Path | None = None) -> None:
        if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
            raise ChromiumMissing(
                f"HEADLESS=1 drives Chromium, and there is none at {CHROMIUM}: install Debian's 'chromium' "
                "package (apt-get install chromium) or set ELICITD_CHROMIUM to its path."
            )
        self.user = user
        self.screenshots = screenshots
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._page: Page | None = None

    async def __aenter__(self) -> HeadlessPerson:
        self._playwright = await async_playwright().start()
        self._browser = await self._playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        context = await self._browser.new_context(locale="en-US", viewport={"width": 1000, "height": 720})
        context.set_default_timeout(TIMEOUT_MS)
        self._page = await context.new_page()
        if self.screenshots is not None:
            self.screenshots.mkdir(parents=True, exist_ok=True)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._browser is not None:
            await self._browser.close()
        if self._playwright is not None:
            await self._playwright.stop()

    @property
    def page(self) -> Page:
        assert self._page is not None, "use HeadlessPerson in `async with`"
        return self._page

    async def _shot(self, name: str) -> None:
        if self.screenshots is not None:
            await self.page.screenshot(path=str(self.screenshots / SHOTS[name]), full_page=True)

    async def _press(self, selector: str) -> None:
        async with self.page.expect_navigation():
            await self.page.click(selector)

    async def connect(self, url: str) -> str:
        """Follow ``url`` to a connected account; returns what the last page says."""
        page = self.page
        await page.goto(url)
        if await page.locator("#sign-in-title").count():  # not signed in to elicitd yet: Dev ID asks who
            await self._shot("sign-in")
            if await page.locator(f"#user-{self.user}").count():
                await self._press(f"#user-{self.user}")
            else:
                await page.fill("#username", self.user)
                await self._press("#sign-in")
        await page.locator("#connect-form").wait_for()
        await self._shot("connect")
        await self._press("#continue")
        await page.locator("#consent-form").wait_for()
        account = page.locator("#account")
        if not await account.input_value():
            await account.fill(self.user)
        await self._shot("consent")
        await self._press("#allow")
        await page.locator("#outcome").wait_for()
        await self._shot("done")
        heading = await page.inner_text("#outcome")
        said = page.locator("#main p.ok, #main p.error")
        return f"{heading}. {' '.join((await said.first.inner_text()).split())}" if await said.count() else heading

    async def show_transcript(self, lines: Sequence[str]) -> None:
        """The host's terminal output as a page, so the answer is in the screenshot set too."""
        if self.screenshots is None:
            return
        body = "\n".join(
            f"<strong>{html.escape(line)}</strong>" if line.startswith("Tool answer") else html.escape(line)
            for line in lines
        )
        await self.page.goto("about:blank")  # a fresh document: the last page's CSP must not apply
        await self.page.set_content(
            "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>make demo</title><style>"
            "body{margin:0;background:#1e1e1e;font:15px/1.5 ui-monospace,monospace;color:#e6e6e6}"
            "h1{margin:0;padding:.6rem 1rem;background:#333;font:600 14px system-ui,sans-serif;color:#ccc}"
            "pre{margin:0;padding:1rem 1.2rem;white-space:pre-wrap;word-break:break-all}strong{color:#8fe388}"
            "</style></head><body><h1>Terminal: make demo (the MCP host)</h1>"
            f"<pre>{body}</pre></body></html>"
        )
        await self._shot("answer")
