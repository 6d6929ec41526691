"""``/schema`` works without internet: Swagger UI's files come from elicitd itself, and a real
Chromium whose every non-loopback request is refused still renders the operations."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.async_api import Route

from service.api_docs import ASSETS, OfflineSwaggerRenderPlugin
from tests.support.apps import RunningApp
from tests.support.browser import chromium_session, new_context, save_screenshot

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


@pytest.mark.browser
async def test_schema_page_renders_with_the_network_blocked(elicitd: RunningApp) -> None:
    blocked: list[str] = []
    loaded: list[tuple[str, int]] = []

    async def loopback_only(route: Route) -> None:
        url = route.request.url
        if urlsplit(url).hostname in LOOPBACK or url.startswith(("data:", "blob:")):
            await route.continue_()
        else:
            blocked.append(url)
            await route.abort("internetdisconnected")

    async with chromium_session() as browser:
        context = await new_context(browser)
        await context.route("**/*", loopback_only)
        page = await context.new_page()
        page.on("response", lambda response: loaded.append((urlsplit(response.url).path, response.status)))
        await page.goto(f"{elicitd.url}/schema")
        operations = page.locator(".opblock .opblock-summary-path")
        await operations.first.wait_for(state="visible")
        paths = set(await operations.all_inner_texts())
        await save_screenshot(page, "api-docs-offline")
    assert blocked == []
    assert {"/v1/flows", "/v1/flows/resolve", "/admin/v1/flows"} <= {path.replace("\u200b", "") for path in paths}
    version = OfflineSwaggerRenderPlugin().version
    for name in ("swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css"):
        assert (f"/schema/assets/{version}/{name}", 200) in loaded


async def test_assets_are_pinned_cacheable_and_nothing_else_is_served(elicitd: RunningApp) -> None:
    plugin = OfflineSwaggerRenderPlugin()
    assert plugin.version == "5.31.0"  # the pinned swagger-ui-bundle-v2 release
    async with elicitd.http() as http:
        page = await http.get("/schema")
        answers = {name: await http.get(f"/schema/assets/{plugin.version}/{name}") for name in ASSETS}
        source_map = await http.get(f"/schema/assets/{plugin.version}/swagger-ui-bundle.js.map")
        escape = await http.get(f"/schema/assets/{plugin.version}/..%2F..%2F__init__.py")
    assert page.status_code == 200
    assert "cdn." not in page.text and "https://" not in page.text.split("<body>")[0]
    for name, answer in answers.items():
        assert answer.status_code == 200, name
        assert answer.headers["content-type"].split(";")[0] == ASSETS[name]
        assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert answer.content == (plugin.dist / name).read_bytes()
    assert (source_map.status_code, escape.status_code) == (404, 404)
