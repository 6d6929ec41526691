"""Headless Chromium for elicitd's browser tests, driven through Playwright's async API.

The tests use the distribution's Chromium (Debian package ``chromium``) rather than a browser
downloaded by ``playwright install``: it is what CI images already ship, and it keeps the suite
free of a second, unpinned browser download. Everything here fails loudly when the browser is
missing — a browser test that skips itself would hide exactly the regressions it exists for.

Usage from a conftest::

    from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
        browser_context, browser_page, chromium_browser, pytest_runtest_makereport,
    )
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ENV = "ELICITD_CHROMIUM"
# No background traffic, no QUIC: every request the browser makes is one the test caused, over
# the same TCP connections the servers under test see.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
SCREENSHOT_DIR = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
NAVIGATION_TIMEOUT_MS = 15_000

_REPORT_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()


class ChromiumNotFoundError(RuntimeError):
    """No usable Chromium binary; the browser tests need one and must not be skipped."""


def chromium_executable() -> str:
    """The Chromium binary: ``$ELICITD_CHROMIUM`` (a path or a name on PATH) or /usr/bin/chromium."""
    configured = os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM
    candidate = configured if os.sep in configured else (shutil.which(configured) or configured)
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise ChromiumNotFoundError(
            f"Chromium not found at {candidate!r}. The browser tests drive a real headless "
            "Chromium: install the Debian package `chromium` (`apt-get install chromium`), or set "
            f"{CHROMIUM_ENV} to the path of a Chromium binary."
        )
    return candidate


async def launch_chromium(playwright: Playwright, **options: Any) -> Browser:
    """Launch Chromium headless with the suite's fixed flags (extra ``options`` go to Playwright)."""
    return await playwright.chromium.launch(
        executable_path=chromium_executable(),
        args=list(CHROMIUM_ARGS),
        headless=True,
        **options,
    )


@asynccontextmanager
async def chromium_session() -> AsyncIterator[Browser]:
    """Playwright plus one Chromium for the duration of the ``async with`` block."""
    executable = chromium_executable()  # fail before starting Playwright's driver process
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS), headless=True)
        try:
            yield browser
        finally:
            await browser.close()


async def new_context(browser: Browser, **options: Any) -> BrowserContext:
    """A fresh context: no cookies or storage shared with any other test.

    ``ignore_https_errors`` defaults to true because test servers use self-signed certificates;
    pass ``ignore_https_errors=False`` to test certificate handling itself.
    """
    settings: dict[str, Any] = {"locale": "en-US", "ignore_https_errors": True}
    settings.update(options)
    context = await browser.new_context(**settings)
    context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
    context.set_default_timeout(NAVIGATION_TIMEOUT_MS)
    return context


async def is_login_page(page: Page) -> bool:
    """Whether ``page`` shows the test OAuth server's login form."""
    return await page.locator("form#login input#username").count() == 1


async def _await_login_form(page: Page, issuer: str | None) -> None:
    await page.locator("form#login").wait_for(state="visible")
    if issuer is not None and not page.url.startswith(f"{issuer.rstrip('/')}/"):
        raise AssertionError(f"expected the login page of {issuer}, the browser is at {page.url}")


async def login_at_issuer(page: Page, username: str, *, issuer: str | None = None) -> None:
    """Sign in as ``username`` on the test OAuth server's login page and follow the redirect.

    ``username`` becomes the ``sub`` of the ID token and the ``login`` of the provider account.
    With ``issuer`` given, the page must belong to that server: a login at the wrong server is a
    test failure, not something to paper over.
    """
    await _await_login_form(page, issuer)
    await page.fill("#username", username)
    async with page.expect_navigation():
        await page.click("#approve")


async def deny_at_issuer(page: Page, *, issuer: str | None = None) -> None:
    """Press *Deny* on the login page: the server redirects back with ``error=access_denied``."""
    await _await_login_form(page, issuer)
    async with page.expect_navigation():
        await page.click("#deny")


async def save_screenshot(page: Page, name: str) -> Path:
    """Save a full-page PNG under tests/artifacts/screenshots/ (gitignored) and return its path."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "screenshot"
    path = SCREENSHOT_DIR / f"{safe}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(path), full_page=True)
    return path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Keep each phase's report on the item so ``browser_page`` can screenshot failures."""
    report = yield
    item.stash.setdefault(_REPORT_KEY, {})[report.when] = report
    return report


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium_browser() -> AsyncIterator[Browser]:
    """One Chromium for the whole session; isolation comes from a fresh context per test."""
    async with chromium_session() as browser:
        yield browser


@pytest_asyncio.fixture(loop_scope="session")
async def browser_context(chromium_browser: Browser) -> AsyncIterator[BrowserContext]:
    context = await new_context(chromium_browser)
    try:
        yield context
    finally:
        await context.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser_page(browser_context: BrowserContext, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A page in a fresh context; on a failed test its last state is saved as a screenshot
    (when the conftest imports :func:`pytest_runtest_makereport`)."""
    page = await browser_context.new_page()
    yield page
    reports = request.node.stash.get(_REPORT_KEY, {})
    call_report = reports.get("call")
    if call_report is not None and call_report.failed and not page.is_closed():
        await save_screenshot(page, f"FAILED-{request.node.nodeid}")
