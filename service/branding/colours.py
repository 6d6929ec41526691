"""Accent colours a brand may set, and the contrast rule they must pass.

The accent styles links, the buttons and the skip link. It is refused, never adjusted, when any
text it takes part in would fall below WCAG's 4.5:1: the accent as text on the page's two
backgrounds (the page and the card), and the button's label on the accent. An adjusted colour
would be a colour the operator never chose and may not recognise as theirs; a refusal names the
failing pair and its ratio, so they can pick one that passes.

The light scheme's accent is required; the dark scheme's is optional and, when it is not given,
the dark scheme keeps elicitd's own accent (no light colour passes on a dark background too).
The backgrounds below are ``elicitd.css``'s; a test reads them from the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_CONTRAST = 4.5
_HEX = re.compile(r"^#[0-9a-fA-F]{6}$")

# The backgrounds the accent is read on, per scheme: elicitd.css's --bg and --card.
BACKGROUNDS: dict[str, tuple[str, ...]] = {"light": ("#f5f6f8", "#ffffff"), "dark": ("#131416", "#1e2023")}
# The button label on the accent: whichever of these reads better on it.
LABELS = ("#ffffff", "#111111")


def _channel(value: int) -> float:
    c = value / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def luminance(colour: str) -> float:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * _channel(r) + 0.7152 * _channel(g) + 0.0722 * _channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG 2.2's contrast ratio, from 1 to 21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def label_for(accent: str) -> str:
    return max(LABELS, key=lambda label: contrast(accent, label))


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One pair below the minimum: which scheme, what is read on what, and the ratio it has."""

    scheme: str
    pair: str
    ratio: float


def normalise(colour: str) -> str | None:
    """``#RRGGBB`` in lowercase, or None when ``colour`` is not six hex digits after a ``#``."""
    return colour.lower() if _HEX.match(colour) else None


def shortfalls(accent: str, scheme: str) -> list[Shortfall]:
    """Every pair the accent takes part in that reads below 4.5:1 in ``scheme`` (all are checked)."""
    found: list[Shortfall] = []
    for background, name in zip(BACKGROUNDS[scheme], ("page", "card"), strict=True):
        ratio = contrast(accent, background)
        if ratio < MIN_CONTRAST:
            found.append(Shortfall(scheme, f"accent on the {name} background {background}", round(ratio, 2)))
    label = label_for(accent)
    ratio = contrast(accent, label)
    if ratio < MIN_CONTRAST:
        found.append(Shortfall(scheme, f"button label {label} on the accent", round(ratio, 2)))
    return found


def stylesheet(accent: str | None, accent_dark: str | None) -> str | None:
    """The brand's stylesheet: it sets only the two accent custom properties, from colours this
    module checked, so nothing a brand sets can reach a rule of its own (the security elements use
    neither property)."""
    if accent is None and accent_dark is None:
        return None
    lines = []
    if accent is not None:
        lines.append(f":root {{ --accent: {accent}; --on-accent: {label_for(accent)}; }}")
    if accent_dark is not None:
        lines.append(
            "@media (prefers-color-scheme: dark) {\n"
            f"  :root {{ --accent: {accent_dark}; --on-accent: {label_for(accent_dark)}; }}\n}}"
        )
    elif accent is not None:
        # The light accent would fail on a dark background: the dark scheme keeps elicitd's own.
        lines.append("@media (prefers-color-scheme: dark) {\n  :root { --accent: #8ab4f8; --on-accent: #0b1a33; }\n}")
    return "\n".join(lines) + "\n"
