"""The addresses ``make run`` prints answer pages that say what is there and how to use it from a
terminal, with the instance's own URLs; each passes axe-core in Chromium."""

from __future__ import annotations

import contextlib
import html
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.async_api import Browser

from service.devtools.keys import DevSecrets
from service.devtools.mount import DevTools
from tests.support.apps import free_port
from tests.support.axe import violations, with_axe
from tests.support.browser import chromium_browser, new_context
from tests.support.serving import InProcessServer


async def elicitd_itself(scope: Any, receive: Any, send: Any) -> None:
    """Stands in for elicitd behind the dev tools: every path it is asked answers 404, as elicitd does."""
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"code": "not_found"}'})


@contextlib.asynccontextmanager
async def dev_instance_pages(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tools = DevTools.build(base, DevSecrets.load_or_create(tmp_path))
    app = tools.wrap(elicitd_itself)
    server = InProcessServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    task = await server.start()
    try:
        yield base
    finally:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await task


async def test_the_root_dev_id_and_demo_files_answer_pages_with_their_facts(tmp_path: Path) -> None:
    async with dev_instance_pages(tmp_path) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
        pages = {path: await http.get(path) for path in ("/", "/dev/id", "/dev/id/", "/dev/files", "/dev/files/")}
        assert {
            path: (page.status_code, page.headers["content-type"]) for path, page in pages.items()
        } == dict.fromkeys(pages, (200, "text/html; charset=utf-8"))
        text = {path: html.unescape(page.text) for path, page in pages.items()}
        assert '<h1 id="about-title">elicitd is running on this machine</h1>' in text["/"]
        for fact in (f"{base}/schema", f"{base}/dev/id", f"{base}/dev/files", ".data/dev-api-key", "make demo"):
            assert fact in text["/"], fact
        assert text["/dev/id"] == text["/dev/id/"]
        for fact in (f"{base}/dev/id/jwks", "ES256", f"curl -s -X POST {base}/dev/id/mint", '"sub": "alice"'):
            assert fact in text["/dev/id"], fact
        for fact in ("demo-files", "files:read", f"GET {base}/dev/files/api/files"):
            assert fact in text["/dev/files"], fact
        # Their own paths stay theirs; the rest is still elicitd's.
        assert (await http.get("/dev/id/jwks")).status_code == 200
        assert (await http.get("/devices")).status_code == 404
        assert (await http.get("/dev/identity")).json() == {"code": "not_found"}


@pytest.mark.browser
async def test_the_pages_pass_axe(chromium_browser: Browser, tmp_path: Path) -> None:
    async with dev_instance_pages(tmp_path) as base:
        context = await new_context(chromium_browser)
        await with_axe(context)
        page = await context.new_page()
        found = {}
        try:
            for path in ("/", "/dev/id", "/dev/files"):
                await page.goto(base + path)
                found[path] = await violations(page)
        finally:
            await context.close()
    assert found == {"/": [], "/dev/id": [], "/dev/files": []}


__all__ = ["chromium_browser"]  # the session fixture, found by name
