"""Which language a page speaks: ``?lang=`` (remembered) over its cookie, over ``Accept-Language``
with quality values over the catalogues that exist, over the operator's default; a catalogue
missing a string shows that one string in English."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service import i18n
from service.i18n import BY_TAG, language_for, negotiate
from service.settings import Settings
from tests.support.apps import RunningApp, running_app

UNKNOWN_FLOW = "/f/fl_" + "0" * 32


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("th-TH,th;q=0.9,en;q=0.8", "th"),
        ("de-AT", "de"),
        ("en;q=0.5, ja;q=0.9", "ja"),
        ("zh-CN,zh;q=0.9", "zh-Hans"),
        ("pt", "pt-BR"),
        ("pt-PT;q=1, fr;q=0.9", "pt-BR"),
        ("ar-EG", "ar"),
        ("fr-CA;q=0.4, es-MX;q=0.4", "fr"),  # equal quality: the header's order
        ("th;q=0, de;q=0.1", "de"),  # q=0 means "not this one"
        ("th-TH, th;q=0", None),  # ``th;q=0`` refuses Thai for th-TH as well
        ("sw, ko;q=0.9", None),  # no shipped catalogue: the caller's default
        ("zh-TW", None),  # Traditional Chinese is not shown in Simplified
        ("*", None),
        ("", None),
        ("en;q=abc, de", "de"),
        ("x" * 2000, None),
    ],
)
def test_accept_language(header: str, expected: str | None) -> None:
    found = negotiate(header)
    assert (found.tag if found else None) == expected


def test_explicit_tags() -> None:
    assert language_for("AR") is BY_TAG["ar"]
    assert language_for("zh-hans") is BY_TAG["zh-hans"]
    assert language_for("pt_BR") is None  # only BCP 47 tags
    assert language_for("<script>") is None
    assert language_for("en-" + "a" * 40) is None


def test_a_partly_translated_catalogue_falls_back_string_by_string(tmp_path: Path) -> None:
    folder = tmp_path / "de" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "messages.po").write_text(
        'msgid ""\nmsgstr ""\n"Language: de\\n"\n"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'
        'msgid "Decline"\nmsgstr "Ablehnen"\n\n'
        'msgid "Approve"\nmsgstr ""\n\n'
        '#, fuzzy\nmsgid "Allow"\nmsgstr "Vielleicht"\n',
        encoding="utf-8",
    )
    catalogue = i18n.load_catalogue(tmp_path, "de")
    assert catalogue.gettext("Decline") == "Ablehnen"
    assert catalogue.gettext("Approve") == "Approve"  # empty: English
    assert catalogue.gettext("Allow") == "Allow"  # fuzzy: never shown
    assert catalogue.gettext("Not in the catalogue") == "Not in the catalogue"
    assert i18n.load_catalogue(tmp_path, "fr").gettext("Decline") == "Decline"  # no catalogue at all


def test_amounts_and_dates_as_each_locale_writes_them() -> None:
    cases = {"th": "฿1,234.00", "de": "1.234,00\xa0€", "en": "$1,234.00", "ja": "￥1,234"}
    currencies = {"th": ("thb", 2), "de": ("eur", 2), "en": ("usd", 2), "ja": ("jpy", 0)}
    for tag, expected in cases.items():
        currency, digits = currencies[tag]
        with i18n.speaking(BY_TAG[tag]):
            amount = 123400 if digits == 2 else 1234
            assert i18n.format_money(amount, currency, minor_digits=digits) == expected
    moment = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    with i18n.speaking(BY_TAG["de"]):
        assert i18n.format_when(moment) == "04.03.2026, 05:06:00 UTC"
    with i18n.speaking(BY_TAG["en"]):
        assert i18n.format_when(moment) == "Mar 4, 2026, 5:06:00\u202fAM UTC"


def test_plural_forms_follow_each_language() -> None:
    with i18n.speaking(BY_TAG["en"]):
        assert (
            i18n.ngettext(
                "%(client)s and %(num)s other service of %(group)s",
                "%(client)s and %(num)s other services of %(group)s",
                1,
                client="A",
                group="G",
            )
            == "A and 1 other service of G"
        )
        assert (
            i18n.ngettext(
                "%(client)s and %(num)s other service of %(group)s",
                "%(client)s and %(num)s other services of %(group)s",
                2,
                client="A",
                group="G",
            )
            == "A and 2 other services of G"
        )


async def test_the_page_language_through_a_real_instance(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        thai = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "th-TH,th;q=0.9,en;q=0.8"})
        german = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "de-AT"})
        unknown = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "sw"})
        bogus = await http.get(UNKNOWN_FLOW + "?lang=xx-evil", headers={"Accept-Language": "de"})
        chosen = await http.get(UNKNOWN_FLOW + "?lang=ar", headers={"Accept-Language": "de"})
        # The browser keeps the cookie: the next page, without ``lang``, is Arabic again.
        after = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "de"})
    assert thai.status_code == 404
    assert '<html lang="th" dir="ltr">' in thai.text
    assert "<h1>ไม่พบลิงก์</h1>" in thai.text
    assert thai.headers["content-language"] == "th"
    assert '<html lang="de" dir="ltr">' in german.text
    assert '<html lang="en" dir="ltr">' in unknown.text
    assert "<h1>Link not found</h1>" in unknown.text
    assert '<html lang="ar" dir="rtl">' in chosen.text
    assert "set-cookie" not in thai.headers
    assert chosen.headers["set-cookie"] == "elicitd_lang=ar; Path=/; Max-Age=31536000; SameSite=Lax; HttpOnly"
    assert "set-cookie" not in bogus.headers
    assert '<html lang="de" dir="ltr">' in bogus.text
    assert '<html lang="ar" dir="rtl">' in after.text
    assert "set-cookie" not in after.headers
    # Remembered: the cookie outranks Accept-Language on the next page.
    async with elicitd.http(cookies={"elicitd_lang": "ar"}) as http:
        remembered = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "de"})
        overridden = await http.get(UNKNOWN_FLOW + "?lang=ja")
    assert '<html lang="ar" dir="rtl">' in remembered.text
    assert "set-cookie" not in remembered.headers
    assert '<html lang="ja" dir="ltr">' in overridden.text
    # The API stays English and untouched.
    async with elicitd.http() as http:
        api = await http.get("/v1/flows/fl_" + "0" * 32, headers={"Accept-Language": "th"})
    assert "content-language" not in api.headers


async def test_the_operator_default_and_the_secure_cookie(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(default_locale="fr")) as app, app.http() as http:
        unknown = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "sw"})
        asked = await http.get(UNKNOWN_FLOW, headers={"Accept-Language": "es"})
    assert '<html lang="fr" dir="ltr">' in unknown.text
    assert '<html lang="es" dir="ltr">' in asked.text
    scope = i18n.LocaleScope(lambda *_: None, default=BY_TAG["en"], secure=True, pages=lambda _: True)  # type: ignore[arg-type]
    assert scope.cookie == "__Host-elicitd_lang"
    assert scope.attributes == "Path=/; Max-Age=31536000; SameSite=Lax; HttpOnly; Secure"


def test_the_default_locale_setting() -> None:
    from service.errors import ConfigurationError

    base = {
        "ELICITD_DATABASE_URL": "postgresql://x/y",
        "ELICITD_KEYS": "k:" + "A" * 43,
        "ELICITD_PUBLIC_URL": "https://e.example",
    }
    assert Settings.from_env({**base, "ELICITD_DEFAULT_LOCALE": "pt-br"}).default_locale == "pt-BR"
    with pytest.raises(ConfigurationError, match="ELICITD_DEFAULT_LOCALE must be one of"):
        Settings.from_env({**base, "ELICITD_DEFAULT_LOCALE": "klingon"})


async def test_error_pages_speak_the_language_and_the_api_stays_english(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        refused = await http.post("/auth/logout", data={"csrf_token": "x"}, headers={"Accept-Language": "th"})
        missing = await http.get("/me/nothing-here", headers={"Accept-Language": "ja"})
        api = await http.get("/v1/nothing-here", headers={"Accept-Language": "ja"})
    assert refused.status_code == 403
    assert "<h1>แบบฟอร์มนี้หมดอายุแล้ว</h1>" in refused.text
    assert "ตรวจสอบแบบฟอร์มไม่ได้ โปรดโหลดหน้านี้ใหม่แล้วลองอีกครั้ง" in refused.text
    assert "set-cookie" not in refused.headers
    assert missing.status_code == 404
    assert "<h1>見つかりません</h1>" in missing.text and "そのリソースはありません。" in missing.text
    assert api.status_code == 404
    assert api.json()["title"] == "Not found"
