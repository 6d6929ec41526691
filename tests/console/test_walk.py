"""Every console page, for every role, in Chromium: signed in through the real OIDC server, the
walker follows each console link (every route template once) from the navigation and checks:

* axe-core finds 0 violations (WCAG 2.0-2.2 A/AA);
* no planted secret is in the page or its HTML source (an API key, a provider's client secret, a
  connection's tokens, a webhook signing secret, an admin token, the session cookie);
* a viewer sees no form that would change something (``method=post``, but sign-out), and every
  console POST route refuses the viewer (403) even with a valid CSRF token;
* the Overview works from the keyboard (skip link first, focus always visible), reflows at 320 px
  without a horizontal scroll, and passes axe in the dark colour scheme too.

Screenshots of the Overview and the sign-in page are written to docs/screenshots/.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from litestar.routes import HTTPRoute
from playwright.async_api import Browser, Page

from service.admin.tokens import Role
from tests.admin.conftest import admin_http, complete_flow, create_flow, hooked_client, make_payment, make_token
from tests.console.conftest import Seeded
from tests.support.apps import RunningApp
from tests.support.axe import violations, with_axe
from tests.support.browser import new_context
from tests.support.factories import grant_connection, store_connection, token_set
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_provider

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
_SKIP = re.compile(r"^/console/(auth/|signin)")
MAX_PAGES = 60


def console_routes(app: RunningApp, method: str) -> list[tuple[str, re.Pattern[str], dict[str, Any]]]:
    """Each console route for ``method``: its template, a regex matching its paths, its handler's opt."""
    found = []
    for route in app.app.routes:
        if not isinstance(route, HTTPRoute) or not route.path.startswith("/console"):
            continue
        for handler in route.route_handlers:
            if method in handler.http_methods:
                pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(route.path_format))
                found.append((route.path_format, re.compile(f"^{pattern}/?$"), dict(handler.opt)))
    return found


def template_of(path: str, routes: list[tuple[str, re.Pattern[str], dict[str, Any]]]) -> str | None:
    matches = [template for template, pattern, _ in routes if pattern.match(path)]
    # The most specific (fewest parameters) wins: /console/clients/new over /console/clients/{id}.
    return min(matches, key=lambda t: (t.count("{"), -len(t))) if matches else None


@pytest.fixture(scope="module")
async def planted(elicitd: RunningApp, oauth: OAuthServer, seeded: Seeded) -> dict[str, str]:
    """Secrets planted where console pages look: the seeded subject's connection (its tokens), the
    provider's client secret, a webhook endpoint's signing secret and a delivery, an admin token."""
    marker = uuid.uuid4().hex[:10]
    provider = f"walk-{marker}"
    client_secret = f"LEAKCS{marker}"
    await register_provider(elicitd, oauth, provider, client_id=f"walk-{marker}", secret=client_secret)
    access, refresh = f"LEAKAT{marker}", f"LEAKRT{marker}"
    connection = await store_connection(
        elicitd,
        provider,
        token_set(access, refresh),
        iss=oauth.issuer,
        sub=seeded.subject,
        account_id=oauth.account_id(seeded.subject),
        account_login=seeded.subject,
        requested=["files:read"],
    )
    hooked, webhook_secret = await hooked_client(elicitd)
    flow = await create_flow(elicitd, hooked, sub=seeded.subject, iss=oauth.issuer)
    assert (await complete_flow(elicitd, hooked, flow)).status_code == 200
    await grant_connection(elicitd, connection, seeded.client.id, ["files:read"])
    token = await make_token(elicitd, "admin")
    async with admin_http(elicitd, token) as http:
        group = await http.post(
            "/admin/v1/trust-groups",
            json={
                "name": f"corp-{marker}",
                "display_name": "Example Corp",
                "members": [seeded.client.public_id, hooked.public_id],
                "allow_unproven": True,
            },
        )
        assert group.status_code == 201, group.text
    await make_payment(elicitd, oauth)
    return {
        "server client API key": seeded.client.api_key,
        "hooked client API key": hooked.api_key,
        "provider client secret": client_secret,
        "access token": access,
        "refresh token": refresh,
        "webhook secret": webhook_secret,
        "admin token": token.secret,
    }


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return [name for name, value in secrets.items() if value and value in text]


async def _walk(page: Page, app: RunningApp, secrets: dict[str, str], role: Role) -> dict[str, list[str]]:
    """Visit every console page reachable by links; each problem found, by page path."""
    routes = console_routes(app, "GET")
    problems: dict[str, list[str]] = {}
    queue = ["/console/"]
    seen_templates: set[str] = set()
    visited = 0
    while queue and visited < MAX_PAGES:
        path = queue.pop(0)
        template = template_of(path.split("?")[0], routes)
        if template is None or template in seen_templates or _SKIP.match(path):
            continue
        seen_templates.add(template)
        visited += 1
        response = await page.goto(app.url + path)
        assert response is not None
        found: list[str] = []
        html = await response.text()
        if response.status != 200:
            # A page for a higher role is refused (403); it is listed above, never linked for this one.
            if not (response.status == 403 and "{" not in template):
                problems[path] = [f"status {response.status}"]
            continue
        if not response.headers.get("content-type", "").startswith("text/html"):
            if leaked := _leaks(html, secrets):
                found.append(f"leaks {leaked}")
            if found:
                problems[path] = found
            continue
        cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
        secrets_here = {**secrets, "session cookie": cookies.get("elicitd_console", "")}
        for name in _leaks(html, secrets_here) + _leaks(await page.content(), secrets_here):
            found.append(f"leaks the {name}")
        if role is Role.ADMIN and os.environ.get("ELICITD_SCREENSHOTS"):
            # Every console page once, as an admin sees it: docs/screenshots/console-page-*.png.
            slug = re.sub(r"[^a-z0-9]+", "-", template.removeprefix("/console").replace("{", "").replace("}", ""))
            name = f"console-page-{slug.strip('-') or 'overview'}.png"
            await page.screenshot(path=str(Path(os.environ["ELICITD_SCREENSHOTS"]) / name), full_page=True)
        if found_violations := await violations(page):
            found.extend(f"axe {v['id']}: {v['nodes'][:2]}" for v in found_violations)
        if role is Role.VIEWER:
            forms = await page.eval_on_selector_all(
                "form",
                "fs => fs.filter(f => f.method.toLowerCase() === 'post' && !f.action.endsWith('/console/auth/logout'))"
                ".map(f => f.getAttribute('action'))",
            )
            if forms:
                found.append(f"a viewer sees action forms {forms}")
        links = await page.eval_on_selector_all("a[href^='/console/']", "as => as.map(a => a.getAttribute('href'))")
        # A search or export form (method=get) leads to a page too: as sent with its values as shown.
        links += await page.eval_on_selector_all(
            "form",
            """fs => fs.filter(f => f.method.toLowerCase() === 'get' && f.getAttribute('action')?.startsWith('/console/'))
                .map(f => { const q = new URLSearchParams(new FormData(f)).toString();
                            return f.getAttribute('action') + (q ? '?' + q : ''); })""",
        )
        queue.extend(link for link in links if link not in queue)
        if found:
            problems[path] = found
    if role is Role.ADMIN:
        # An admin reaches every console page by following links: none is a dead end or orphaned.
        unreached = {t for t, _, _ in routes if not _SKIP.match(t)} - seen_templates
        if unreached:
            problems["(not linked from any page)"] = sorted(unreached)
    return problems


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR, Role.ADMIN], ids=lambda r: r.label)
async def test_every_console_page_for_each_role(
    elicitd: RunningApp,
    planted: dict[str, str],
    chromium_browser: Browser,
    signed_in_page: Callable[..., Any],
    role: Role,
) -> None:
    context = await new_context(chromium_browser)
    await with_axe(context)
    try:
        page = await signed_in_page(await context.new_page(), role)
        problems = await _walk(page, elicitd, planted, role)
        assert problems == {}
    finally:
        await context.close()


async def test_a_viewer_is_refused_every_console_post(
    elicitd: RunningApp, console: Callable[..., Any], planted: dict[str, str]
) -> None:
    posts = [(t, opt) for t, _, opt in console_routes(elicitd, "POST") if not opt.get("public")]
    assert posts, "the console has action routes"
    answered = {}
    async with console(Role.VIEWER) as viewer:
        for template, opt in posts:
            assert opt.get("role", Role.VIEWER) >= Role.OPERATOR, f"{template} lets a viewer change something"
            path = re.sub(r"\{[^}:]+:uuid\}", str(uuid.uuid4()), template)
            path = re.sub(r"\{[^}:]+:int\}", "1", path)
            path = re.sub(r"\{[^}]+\}", f"x{uuid.uuid4().hex[:6]}", path)
            response = await viewer.post(path, {"confirm": "yes"})
            answered[template] = response.status_code
            assert not _leaks(response.text, planted)
    assert set(answered.values()) == {403}, answered


async def test_the_overview_by_keyboard_at_320px_and_in_the_dark(
    elicitd: RunningApp, planted: dict[str, str], chromium_browser: Browser, signed_in_page: Callable[..., Any]
) -> None:
    context = await new_context(chromium_browser)
    await with_axe(context)
    try:
        page = await signed_in_page(await context.new_page(), Role.OPERATOR)
        await page.keyboard.press("Tab")
        first = await page.evaluate("document.activeElement.className")
        assert first == "skip"
        assert await page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
        await page.keyboard.press("Enter")
        assert await page.evaluate("document.activeElement.id") == "main"
        # From the top, Tab reaches every focusable element in order, each with a visible focus ring
        # (loaded again without the skip link's #main, where the next Tab would start otherwise).
        await page.goto(page.url.split("#")[0])
        stops = await page.evaluate(
            "document.querySelectorAll('a[href], button, input:not([type=hidden]), select, [tabindex=\"0\"]').length"
        )
        reached: list[str] = []
        for _ in range(stops + 1):
            await page.keyboard.press("Tab")
            focus = await page.evaluate(
                "(() => { const e = document.activeElement; const s = getComputedStyle(e);"
                " return [e.tagName + (e.id ? '#' + e.id : ''), s.outlineStyle, s.outlineWidth]; })()"
            )
            if focus[0] == "BODY":
                break
            reached.append(focus[0])
            assert focus[1] != "none" and focus[2] != "0px", f"no visible focus on {focus[0]}"
        assert len(reached) == stops, reached
        assert "BUTTON#sign-out" in reached
        await page.set_viewport_size({"width": 320, "height": 800})
        assert await page.evaluate("document.documentElement.scrollWidth") <= 320
        await page.emulate_media(color_scheme="dark")
        assert await violations(page) == []
        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.emulate_media(color_scheme="light")
        await page.screenshot(path=str(SCREENSHOTS / "console-overview-overview.png"), full_page=True)
        await page.context.clear_cookies()
        await page.goto(f"{elicitd.url}/console/")
        assert "/console/signin" in page.url
        assert await violations(page) == []
        await page.screenshot(path=str(SCREENSHOTS / "console-signin-signin.png"), full_page=True)
    finally:
        await context.close()
