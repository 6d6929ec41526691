"""The accent's contrast rule, against the backgrounds the stylesheet really has."""

from __future__ import annotations

import re

from service.branding.colours import BACKGROUNDS, MIN_CONTRAST, contrast, shortfalls, stylesheet
from tests.i18n.pages import STYLESHEET


def test_the_checked_backgrounds_are_the_stylesheets() -> None:
    css = STYLESHEET.read_text()
    light, dark = re.findall(r"--bg: (#[0-9a-f]{6}); --card: (#[0-9a-f]{3,6});", css)
    expand = {"#fff": "#ffffff"}
    assert BACKGROUNDS["light"] == (light[0], expand.get(light[1], light[1]))
    assert BACKGROUNDS["dark"] == (dark[0], expand.get(dark[1], dark[1]))


def test_elicitds_own_accents_pass_and_a_pale_one_fails() -> None:
    assert shortfalls("#0b57d0", "light") == []
    assert shortfalls("#8ab4f8", "dark") == []
    pale = shortfalls("#ffcc00", "light")
    assert [s.pair for s in pale] == [
        "accent on the page background #f5f6f8",
        "accent on the card background #ffffff",
    ]
    assert all(s.ratio < MIN_CONTRAST for s in pale)
    # A mid grey passes neither as text on the dark card nor under a label.
    assert [s.pair.split(" #")[0] for s in shortfalls("#777777", "dark")] == [
        "accent on the page background",
        "accent on the card background",
        "button label",
    ]


def test_contrast_is_wcags_ratio() -> None:
    assert round(contrast("#000000", "#ffffff"), 2) == 21.0
    assert round(contrast("#777777", "#ffffff"), 2) == 4.48


def test_the_stylesheet_sets_only_the_two_accent_properties() -> None:
    css = stylesheet("#0b57d0", None)
    assert css is not None
    assert set(re.findall(r"--[a-z-]+(?=:)", css)) == {"--accent", "--on-accent"}
    assert "#8ab4f8" in css  # the dark scheme keeps elicitd's own accent
    assert stylesheet(None, None) is None
