"""The language of a person's page: which locale, its catalogue, and locale-aware words and numbers.

The locale of a request is chosen once, by ``LocaleScope`` (the outermost layer of the app for
browser paths): an explicit ``?lang=`` (then remembered in a cookie) over the cookie, over the
browser's ``Accept-Language`` (quality values honoured, only over the catalogues that exist), over
the operator's ``ELICITD_DEFAULT_LOCALE``. It lives in a context variable for the rest of the
request, so the page helpers, templates and error pages all translate without being handed it.

Catalogues are the ``.po`` files under ``service/locale/`` (the only form kept in the repository);
each is compiled in memory the first time a page in its language renders (4 to 30 ms each, measured
on a busy two-core machine; Babel itself imports in ~160 ms there), so a process that never
renders a page never imports Babel. gettext falls back string by string: a message missing or
empty in a catalogue is shown in English, never as a broken page.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

if TYPE_CHECKING:
    from gettext import NullTranslations

LOCALE_DIR = Path(__file__).parent / "locale"
DOMAIN = "messages"
COOKIE = "elicitd_lang"
COOKIE_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Language:
    tag: str  # BCP 47, as ``lang=`` and the cookie carry it
    catalogue: str  # the Babel/gettext locale identifier, the catalogue's folder name
    name: str  # the language's own name for itself, as the language links show it
    rtl: bool = False


LANGUAGES: tuple[Language, ...] = (
    Language("en", "en", "English"),
    Language("th", "th", "ไทย"),
    Language("ja", "ja", "日本語"),
    Language("zh-Hans", "zh_Hans", "简体中文"),
    Language("es", "es", "Español"),
    Language("de", "de", "Deutsch"),
    Language("fr", "fr", "Français"),
    Language("pt-BR", "pt_BR", "Português (Brasil)"),
    Language("ar", "ar", "العربية", rtl=True),
)
BY_TAG = {language.tag.lower(): language for language in LANGUAGES}
DEFAULT = BY_TAG["en"]
# Tags a browser sends for a shipped catalogue under another name (the script is implied by the region).
_ALIASES = {
    "zh": "zh-hans",
    "zh-cn": "zh-hans",
    "zh-sg": "zh-hans",
    "zh-hans-cn": "zh-hans",
    "zh-hans-sg": "zh-hans",
    "pt": "pt-br",
}
_TAG = re.compile(r"^[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*$")
MAX_ACCEPT_LANGUAGE = 1024


def language_for(tag: str | None) -> Language | None:
    """The shipped language a tag names: exact, an alias, or its primary subtag (``de-AT`` → ``de``)."""
    if not tag or len(tag) > 35 or not _TAG.fullmatch(tag):
        return None
    lowered = tag.lower()
    if (found := BY_TAG.get(_ALIASES.get(lowered, lowered))) is not None:
        return found
    if lowered.startswith("zh-") and any(part in {"hant", "tw", "hk", "mo"} for part in lowered.split("-")[1:]):
        return None  # Traditional Chinese is not Simplified Chinese; the default reads better than the wrong script
    primary = lowered.split("-", 1)[0]
    return BY_TAG.get(_ALIASES.get(primary, primary))


def negotiate(accept_language: str | None) -> Language | None:
    """The best shipped language for an ``Accept-Language`` header (RFC 9110 §12.5.4), or None.

    Higher quality first; among equal qualities the header's order; ``q=0`` means "not this one";
    ``*`` and unknown languages are passed over (the caller falls back to the operator's default)."""
    if not accept_language or len(accept_language) > MAX_ACCEPT_LANGUAGE:
        return None
    ranked: list[tuple[float, int, str]] = []
    refused: set[Language] = set()
    for index, item in enumerate(accept_language.split(",")):
        tag, _, params = item.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if 0.0 < quality <= 1.0:
            ranked.append((-quality, index, tag.strip()))
        elif (unwanted := BY_TAG.get(tag.strip().lower())) is not None:
            refused.add(unwanted)  # ``th;q=0``: never Thai, even for ``th-TH``
    for _, _, tag in sorted(ranked):
        found = language_for(tag)
        if found is not None and found not in refused:
            return found
    return None


# ---- the request's language -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PageLocale:
    language: Language
    path: str = "/"
    query: str = ""
    method: str = "GET"


_current: contextvars.ContextVar[PageLocale | None] = contextvars.ContextVar("elicitd_page_locale", default=None)


def current() -> Language:
    """The language of the page being rendered (English outside a browser request)."""
    scope = _current.get()
    return scope.language if scope is not None else DEFAULT


def current_page() -> PageLocale:
    return _current.get() or PageLocale(DEFAULT)


@contextlib.contextmanager
def speaking(language: Language) -> Iterator[None]:
    """Render in ``language`` for the duration of the block (the CLI, tests, a page outside a request)."""
    token = _current.set(PageLocale(language))
    try:
        yield
    finally:
        _current.reset(token)


# ---- catalogues -----------------------------------------------------------------------------------
def load_catalogue(directory: Path, catalogue: str) -> NullTranslations:
    """The compiled catalogue of one locale from its ``.po`` file; English (the msgids) when absent.

    Entries with an empty or fuzzy ``msgstr`` are left out when compiling, so gettext answers
    those with the English message: a half-translated catalogue is a page in two languages, never
    a page with holes."""
    from gettext import GNUTranslations, NullTranslations
    from io import BytesIO

    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    path = directory / catalogue / "LC_MESSAGES" / f"{DOMAIN}.po"
    if not path.is_file():
        return NullTranslations()
    with path.open("rb") as source:
        parsed = read_po(source, locale=catalogue, domain=DOMAIN)
    compiled = BytesIO()
    write_mo(compiled, parsed, use_fuzzy=False)
    compiled.seek(0)
    return GNUTranslations(compiled)


@cache
def translations(catalogue: str) -> NullTranslations:
    return load_catalogue(LOCALE_DIR, catalogue)


def N_(message: str) -> str:
    """Mark a message kept in a constant; it is translated where it is shown, with ``_``."""
    return message


def _(message: str, **values: Any) -> str:
    """``message`` in the page's language, with ``%(name)s`` placeholders filled from ``values``."""
    translated = translations(current().catalogue).gettext(message)
    return translated % values if values else translated


def ngettext(singular: str, plural: str, count: int, **values: Any) -> str:
    """The plural form the page's language uses for ``count`` (``%(num)s`` is the count)."""
    translated = translations(current().catalogue).ngettext(singular, plural, count)
    return translated % {"num": count, **values}


def isolate(value: str) -> str:
    """A value set into a right-to-left page's plain text in its own direction (U+2068 … U+2069,
    what ``<bdi>`` does in markup), so a Latin domain or name inside an Arabic sentence cannot
    reorder the words around it. Templates isolate every value with ``<bdi>`` in every language;
    these plain-text sentences (headings, which are also page titles) need it where the page's
    direction differs from the Latin names, and the text rule already refuses bidi controls in
    the names themselves."""
    return f"\u2068{value}\u2069" if current().rtl else value


# ---- numbers and dates ----------------------------------------------------------------------------
def format_money(amount: int, currency: str, *, minor_digits: int) -> str:
    """An amount in minor units as the page's locale writes it: ``฿1,234.00``, ``1.234,00 €``."""
    from babel.numbers import format_currency

    value = Decimal(amount).scaleb(-minor_digits)
    return format_currency(value, currency.upper(), locale=current().catalogue)


def format_when(value: datetime) -> str:
    """A moment as the page's locale writes dates and times, in UTC (the zone is said)."""
    from datetime import UTC

    from babel.dates import format_datetime

    return format_datetime(value.astimezone(UTC), "medium", tzinfo=UTC, locale=current().catalogue) + " UTC"


# ---- choosing the language of a request ------------------------------------------------------------
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def _cookies(header: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        found.setdefault(name, value)
    return found


class LocaleScope:
    """Choose the language of every browser page, and remember an explicit ``?lang=``.

    The cookie holds only a tag from ``LANGUAGES`` (never what the query said), is ``HttpOnly``
    (nothing on the page reads it), ``SameSite=Lax``, ``Path=/`` for one year, and under TLS
    ``Secure`` with the ``__Host-`` prefix, like elicitd's other cookies."""

    def __init__(self, app: ASGIApp, *, default: Language, secure: bool, pages: Callable[[str], bool]) -> None:
        self.app = app
        self.default = default
        self.pages = pages
        self.cookie = ("__Host-" if secure else "") + COOKIE
        self.attributes = f"Path=/; Max-Age={COOKIE_SECONDS}; SameSite=Lax; HttpOnly" + ("; Secure" if secure else "")

    def choose(self, scope: Any) -> tuple[Language, bool]:
        """The request's language, and whether it was chosen explicitly just now (to remember)."""
        query = scope.get("query_string", b"").decode("latin-1")
        asked = next((value for name, value in parse_qsl(query) if name == "lang"), None)
        if (explicit := language_for(asked)) is not None:
            return explicit, True
        headers = {name: value for name, value in scope.get("headers", ()) if name in (b"cookie", b"accept-language")}
        remembered = _cookies(headers.get(b"cookie", b"").decode("latin-1")).get(self.cookie)
        chosen = language_for(remembered) or negotiate(headers.get(b"accept-language", b"").decode("latin-1"))
        return chosen or self.default, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.pages(scope["path"]):
            await self.app(scope, receive, send)
            return
        language, explicit = self.choose(scope)
        query = scope.get("query_string", b"").decode("latin-1")
        token = _current.set(PageLocale(language, scope["path"], query, scope.get("method", "GET")))

        async def send_with_language(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"content-language", language.tag.encode()))
                if explicit:
                    cookie = f"{self.cookie}={language.tag}; {self.attributes}"
                    headers.append((b"set-cookie", cookie.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_language)
        finally:
            _current.reset(token)


# ---- what the templates use -----------------------------------------------------------------------
# Query parameters a language link keeps: a page's own identity (``/me?iss=``), never a code,
# a state or anything else a redirect brought.
_KEPT_PARAMETERS = {"iss"}
# A flow's id where a form POST names it (``/connect/fl_…/continue``, ``/f/fl_…/grant``, …).
_FLOW_IN_PATH = re.compile(r"/(fl_[0-9a-f]{32})(?:/|$)")


def _reopened(page: PageLocale, flow_id: str | None) -> str | None:
    """Where a page answering a form POST can be opened again in another language: a GET of the
    POST's own address would fail or, worse, repeat nothing the person meant. The flow's page
    (named by the page, or by the address the form posted to) shows the flow as it now stands;
    the person's own page (``/me``, which asks which sign-in when it does not know) follows a POST
    from it. ``/auth/logout`` has no such page: it ends a session, and its short answer is in the
    language chosen before."""
    if flow_id and flow_id != "-":
        return f"/f/{flow_id}"
    found = _FLOW_IN_PATH.search(page.path)
    if found is not None:
        return f"/f/{found.group(1)}"
    if page.path.startswith("/me/"):
        return "/me"
    return None


def language_links(flow_id: str | None = None) -> list[dict[str, Any]]:
    """A link to this page in each shipped language. A page answering a form POST links to the
    page that shows the same thing by GET (``_reopened``); sign-in callbacks get none (their code
    is single-use)."""
    page = current_page()
    if page.path.startswith("/auth/"):
        return []
    if page.method == "GET":
        path = page.path
        kept = [(name, value) for name, value in parse_qsl(page.query) if name in _KEPT_PARAMETERS]
    else:
        reopened = _reopened(page, flow_id)
        if reopened is None:
            return []
        path, kept = reopened, []
    return [
        {
            "tag": language.tag,
            "name": language.name,
            "href": f"{path}?{urlencode([*kept, ('lang', language.tag)])}",
            "current": language == page.language,
            "dir": "rtl" if language.rtl else "ltr",
        }
        for language in LANGUAGES
    ]


def page_globals() -> dict[str, Any]:
    return {
        "page_lang": lambda: current().tag,
        "page_dir": lambda: "rtl" if current().rtl else "ltr",
        "language_links": language_links,
    }
