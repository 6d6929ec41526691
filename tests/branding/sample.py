"""The connect page of the page sweep (``tests/i18n/pages.py``) with a brand: a logo elicitd
re-encoded, accents for both schemes, a support link and a line of text. The sweep serves the
logo and the stylesheet at the paths the page links, as elicitd does."""

from __future__ import annotations

import hashlib

from service import i18n
from service.branding.colours import stylesheet
from service.branding.images import reencode
from service.branding.store import LOGO_ROUTE, STYLE_ROUTE, ShownBrand
from service.i18n import Language
from service.templating import LazyJinjaEngine
from tests.branding.images import wordmark
from tests.i18n.pages import DOMAIN, TEMPLATES, contexts

NAME = "connect_branded"
# Each branded sample and the page it brands.
BRANDED = {NAME: "connect", "grant_branded": "grant"}
ACCENT, ACCENT_DARK = "#6a1b9a", "#ce93d8"
LOGO = reencode(wordmark())
STYLE = stylesheet(ACCENT, ACCENT_DARK) or ""
LOGO_PATH = f"{LOGO_ROUTE}{LOGO.sha256}.png"
STYLE_PATH = f"{STYLE_ROUTE}{hashlib.sha256(STYLE.encode()).hexdigest()}.css"
BRAND = ShownBrand(
    logo_url=LOGO_PATH,
    logo_width=LOGO.width,
    logo_height=LOGO.height,
    style_url=STYLE_PATH,
    support_url="https://help.acme.example/files",
    support_host="help.acme.example",
    tagline="Acme Files — documents for your team",
)
ASSETS: dict[str, tuple[bytes, str]] = {LOGO_PATH: (LOGO.png, "image/png"), STYLE_PATH: (STYLE.encode(), "text/css")}

_ENGINE = LazyJinjaEngine(TEMPLATES, page_globals={"domain": DOMAIN})


def render_branded(language: Language, name: str = NAME) -> str:
    with i18n.speaking(language):
        template, build = contexts()[BRANDED[name]]
        return _ENGINE.get_template(template).render(**build(), client_brand=BRAND)
