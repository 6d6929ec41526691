"""Every person-facing page in every shipped language, opened in Chromium at 1280 and 320 px:
axe-core finds no WCAG 2.0/2.1/2.2 A or AA violation (at 320 px in English, Thai, Japanese and
Arabic), nothing scrolls sideways on a phone, and ``lang``/``dir`` are right. Arabic pages mirror while URLs, domains, ids and scope strings keep
their own direction. Screenshots of the connect, grant and payment pages go to
``tests/artifacts/screenshots/i18n/``.

The pages are the real templates and stylesheet rendered as elicitd renders them
(``tests/i18n/pages.py``), served to the browser through request interception; one browser and
one context serve the whole sweep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, Route

from service.i18n import BY_TAG, LANGUAGES, Language
from service.text import display_text_problem
from tests.branding import sample
from tests.i18n.pages import ACCOUNT, PROVIDER_HOST, RTL_CLIENT, STYLESHEET, contexts, render
from tests.support import axe
from tests.support.browser import SCREENSHOT_DIR, new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ORIGIN = "https://elicitd.test"
SHOTS = SCREENSHOT_DIR / "i18n"
SCREENSHOT_PAGES = (
    "connect",
    "connect_parameters",
    "connect_parameters_check",
    *sample.BRANDED,
    "grant",
    "grant_wider",
    "payment",
    "api_key",
    "me",
)
SCREENSHOT_LANGUAGES = ("en", "th", "ja", "ar")
# What every page sends: the same policy, so axe runs under it (it is injected through DevTools).
CSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self' https:"
# The languages whose line breaking differs most: Latin, Thai, Japanese, Arabic.
SCRIPTS = ("en", "th", "ja", "ar")


def page_names() -> list[str]:
    """Every sample page, and the connect page with a server client's brand."""
    return [*contexts(), *sample.BRANDED]


def _render(language: Language, name: str) -> str:
    return sample.render_branded(language, name) if name in sample.BRANDED else render(language, name)


@pytest_asyncio.fixture(loop_scope="session")
async def sweep(chromium_browser: Browser) -> AsyncIterator[tuple[BrowserContext, Page]]:
    context = await new_context(chromium_browser, viewport={"width": 1280, "height": 900})
    await axe.with_axe(context)
    stylesheet = STYLESHEET.read_bytes()

    async def serve(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/static/elicitd.css":
            await route.fulfill(body=stylesheet, content_type="text/css")
            return
        if path in sample.ASSETS:
            asset, kind = sample.ASSETS[path]
            await route.fulfill(body=asset, content_type=kind)
            return
        _, tag, name = path.split("/", 2)
        body = _render(BY_TAG[tag.lower()], name.split("?", 1)[0])
        await route.fulfill(
            body=body, content_type="text/html; charset=utf-8", headers={"Content-Security-Policy": CSP}
        )

    await context.route(f"{ORIGIN}/**", serve)
    page = await context.new_page()
    try:
        yield context, page
    finally:
        await context.close()


async def _open(page: Page, language: Language, name: str) -> None:
    await page.goto(f"{ORIGIN}/{language.tag}/{name}")


async def _no_sideways_scroll(page: Page) -> bool:
    return bool(await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


@pytest.mark.parametrize("language", LANGUAGES, ids=[language.tag for language in LANGUAGES])
async def test_every_page_passes_axe_at_both_widths(sweep: tuple[BrowserContext, Page], language: Language) -> None:
    """Each page at 1280 px (axe), then the same page narrowed to 320 px (no sideways scroll, and
    axe again for the scripts whose line breaking differs most: Latin, Thai, Japanese, Arabic)."""
    _, page = sweep
    problems: dict[str, object] = {}
    for stale in SHOTS.glob(f"*-{language.tag}*.png"):
        stale.unlink()  # only this run's screenshots count
    SHOTS.mkdir(parents=True, exist_ok=True)
    shoot = language.tag in SCREENSHOT_LANGUAGES
    for name in page_names():
        await page.set_viewport_size({"width": 1280, "height": 900})
        await _open(page, language, name)
        html = page.locator("html")
        assert (await html.get_attribute("lang"), await html.get_attribute("dir")) == (
            language.tag,
            "rtl" if language.rtl else "ltr",
        ), name
        if found := await axe.violations(page):
            problems[f"{name}@1280"] = found
        if shoot and name in SCREENSHOT_PAGES:
            await page.screenshot(path=str(SHOTS / f"{name}-{language.tag}.png"), full_page=True)
        await page.set_viewport_size({"width": 320, "height": 900})
        if not await _no_sideways_scroll(page):
            problems[f"{name}@320"] = "scrolls sideways"
        if shoot and (found := await axe.violations(page)):
            problems[f"{name}@320"] = found
        if shoot and name == "connect":
            await page.screenshot(path=str(SHOTS / f"{name}-{language.tag}-320.png"), full_page=True)
    assert problems == {}
    if shoot:
        assert [name for name in SCREENSHOT_PAGES if not (SHOTS / f"{name}-{language.tag}.png").is_file()] == []


@pytest.mark.parametrize("tag", ["en", "ar"])
async def test_every_page_passes_axe_in_the_dark_colour_scheme(sweep: tuple[BrowserContext, Page], tag: str) -> None:
    """``prefers-color-scheme: dark`` swaps every colour; the swapped ones must hold AA too."""
    _, page = sweep
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.emulate_media(color_scheme="dark")
    try:
        problems: dict[str, object] = {}
        for name in page_names():
            await _open(page, BY_TAG[tag], name)
            assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(19, 20, 22)"
            if found := await axe.violations(page):
                problems[name] = found
            if name in {"connect", sample.NAME}:
                SHOTS.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(SHOTS / f"{name}-{tag}-dark.png"), full_page=True)
        assert problems == {}
    finally:
        await page.emulate_media(color_scheme="light")


async def test_arabic_mirrors_and_keeps_urls_ids_and_scopes_left_to_right(sweep: tuple[BrowserContext, Page]) -> None:
    _, page = sweep
    await page.set_viewport_size({"width": 1280, "height": 900})
    arabic = BY_TAG["ar"]
    await _open(page, arabic, "connect")
    assert await page.evaluate("getComputedStyle(document.body).direction") == "rtl"
    # Mirrored: the first fact's label sits at the right edge of the card, the button row starts there too.
    card = await page.locator("main").bounding_box()
    label = await page.locator("#connect-facts dt").first.bounding_box()
    assert card is not None and label is not None
    assert abs((card["x"] + card["width"]) - (label["x"] + label["width"])) < 40
    # The provider's domain (with its punycode form), the account and the scope strings keep LTR.
    host = page.locator("#provider bdi[dir=ltr]")
    assert await host.inner_text() == PROVIDER_HOST
    assert await host.evaluate("e => getComputedStyle(e).direction") == "ltr"
    assert await page.locator("#connect-facts dd bdi[dir=ltr]").nth(1).inner_text() == "alice"
    for code in await page.locator("#scopes code").all():
        assert await code.evaluate("e => getComputedStyle(e).direction + ' ' + getComputedStyle(e).unicodeBidi") == (
            "ltr isolate"
        )
    # A server name in Arabic is its own isolate, so it cannot pull the Latin words around it.
    member = page.locator("#members strong bdi", has_text=RTL_CLIENT)
    assert await member.count() == 1
    # A group's sentence is Arabic around Latin names: isolated in the page's direction, not the
    # first name's (which would lay the Arabic words out left to right).
    assert await page.locator("#grantee > bdi").get_attribute("dir") == "rtl"
    # A catalog-made API-key form: its labels come through the catalogue, not as the entry wrote them.
    await _open(page, arabic, "api_key_catalog")
    assert [await page.locator(f"label[for={f}]").inner_text() for f in ("secret", "field_account_sid")] == [
        "رمز المصادقة",
        "معرّف SID لحسابك",
    ]
    await _open(page, arabic, "grant")
    assert await page.locator("#account bdi[dir=ltr]").inner_text() == ACCOUNT
    assert await page.locator("#grant-title bdi[dir=ltr]").inner_text() == ACCOUNT
    # The text rule keeps bidi controls out of the names in the first place.
    assert display_text_problem("Acme\u202e Files", "display_name") is not None


async def test_keyboard_reaches_every_action_in_order_with_visible_focus(sweep: tuple[BrowserContext, Page]) -> None:
    """Tab from the top of the connect page: the skip link, the page's two actions in reading
    order, then the language links; every focused element shows its 3 px outline."""
    _, page = sweep
    await page.set_viewport_size({"width": 1280, "height": 900})
    for tag in ("en", "ar"):
        await _open(page, BY_TAG[tag], "connect")
        order: list[str] = []
        for _ in range(5):
            await page.keyboard.press("Tab")
            focused = await page.evaluate(
                """() => { const e = document.activeElement, s = getComputedStyle(e);
                    return [e.id || "lang-" + e.getAttribute("hreflang"), s.outlineStyle + " " + s.outlineWidth]; }"""
            )
            assert focused[1] == "solid 3px", focused
            order.append(focused[0])
        assert order == ["skip", "continue", "decline", "lang-en", "lang-th"]
        await _open(page, BY_TAG[tag], "connect")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")
        assert page.url.endswith("#main")


# What "nothing sideways" means at 200 %: the page is no wider than the window, and no element
# reaches past either edge (an element cut off by ``overflow: hidden`` would pass the first check).
_NOTHING_PAST_THE_EDGES = """() => {
    const width = document.documentElement.clientWidth;
    const out = [...document.querySelectorAll("body *")].filter(e => {
        const r = e.getBoundingClientRect(), s = getComputedStyle(e);
        if (r.width === 0 || s.visibility === "hidden" || e.id === "skip") return false;
        return r.left < -0.5 || r.right > width + 0.5;
    }).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : ""));
    return [document.documentElement.scrollWidth <= width, out];
}"""


@pytest.mark.parametrize("tag", SCRIPTS)
async def test_every_page_works_at_200_percent_zoom(chromium_browser: Browser, tag: str) -> None:
    """A 1280 x 900 window zoomed to 200 %: the layout has 640 x 450 CSS pixels at two device
    pixels each, which is what Chromium's zoom gives a page. Every page: no sideways scrolling,
    nothing past either edge, the actions on screen by scrolling down alone, and axe finds nothing."""
    context = await new_context(chromium_browser, viewport={"width": 640, "height": 450}, device_scale_factor=2)
    await axe.with_axe(context)
    stylesheet = STYLESHEET.read_bytes()
    language = BY_TAG[tag]

    async def serve(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/static/elicitd.css":
            await route.fulfill(body=stylesheet, content_type="text/css")
        elif path in sample.ASSETS:
            asset, kind = sample.ASSETS[path]
            await route.fulfill(body=asset, content_type=kind)
        else:
            name = path.split("/", 2)[2]
            await route.fulfill(
                body=_render(language, name),
                content_type="text/html; charset=utf-8",
                headers={"Content-Security-Policy": CSP},
            )

    await context.route(f"{ORIGIN}/**", serve)
    page = await context.new_page()
    problems: dict[str, object] = {}
    try:
        assert await page.evaluate("window.devicePixelRatio") == 2
        for name in page_names():
            await _open(page, language, name)
            fits, past = await page.evaluate(_NOTHING_PAST_THE_EDGES)
            if not fits or past:
                problems[name] = {"scrolls sideways": not fits, "past the edges": past}
            if found := await axe.violations(page):
                problems[f"{name} axe"] = found
            if name in {"connect", sample.NAME}:
                SHOTS.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(SHOTS / f"{name}-{tag}-200.png"), full_page=True)
    finally:
        await context.close()
    assert problems == {}


# elicitd's own elements on the connect and grant pages: its name and the page's domain, who asks,
# for which account at which provider domain, who is signed in, the domain again in the footer.
_SECURITY = ("header.top > .brand", "header.top > .domain", "dl.facts", "footer.foot > p")
_LOOK = """(e) => [e.outerHTML, [e, ...e.querySelectorAll("*")].map(n => {
    const s = getComputedStyle(n), r = n.getBoundingClientRect();
    return [n.tagName, s.color, s.backgroundColor, s.fontSize, s.fontWeight, s.display, s.visibility,
            s.opacity, Math.round(r.width), Math.round(r.height)];
})]"""


@pytest.mark.parametrize("tag", ["en", "ar"])
async def test_a_brand_leaves_elicitds_own_elements_as_they_are(sweep: tuple[BrowserContext, Page], tag: str) -> None:
    """The connect and grant pages with a brand and without: elicitd's elements have the same markup,
    and each of them and everything inside keeps its colours, size and visibility, in both schemes."""
    _, page = sweep
    await page.set_viewport_size({"width": 1280, "height": 900})
    try:
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            for branded, plain in sample.BRANDED.items():
                looks = []
                for name in (plain, branded):
                    await _open(page, BY_TAG[tag], name)
                    looks.append([await page.locator(s).first.evaluate(_LOOK) for s in _SECURITY])
                assert looks[0] == looks[1], (scheme, branded)
                assert await page.locator("#partner img").evaluate("e => e.complete && e.naturalWidth") > 0
    finally:
        await page.emulate_media(color_scheme="light")
