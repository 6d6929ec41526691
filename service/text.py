"""The one text rule for every string a person reads: on elicitd's pages or in an MCP client.

A caller-supplied string must not be able to hide, reorder or fake what is shown next to it, so
these Unicode categories are refused, wherever the string comes from (the API, the admin API, a
config file):

* ``Cc`` control characters (C0 and C1: a carriage return could forge a line of its own);
* ``Cf`` format characters: bidi overrides and isolates (U+202A to U+202E, U+2066 to U+2069), the
  Arabic letter mark U+061C, zero-width spaces and joiners, the byte-order mark, tag characters;
* ``Zl`` / ``Zp`` the line and paragraph separators U+2028 and U+2029;
* ``Cs`` lone surrogates (they cannot even be stored).

Text that may span lines (a consent description, a flow message) keeps ``\\n`` and ``\\t``.
"""

from __future__ import annotations

import unicodedata

REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_MULTILINE_ALLOWED = frozenset("\n\t")


def refused_character(value: str, *, multiline: bool = False) -> str | None:
    """The first character the rule refuses (None when there is none)."""
    if value.isprintable():  # the common case: no character of any refused category, in C
        return None
    allowed = _MULTILINE_ALLOWED if multiline else frozenset()
    for char in value:
        if char not in allowed and unicodedata.category(char) in REFUSED_CATEGORIES:
            return char
    return None


def is_display_text(value: str, *, multiline: bool = False) -> bool:
    return refused_character(value, multiline=multiline) is None


def display_text_problem(value: str | None, field: str, *, multiline: bool = False) -> str | None:
    """Why ``value`` breaks the rule, in words fit for an error body (the character by code point,
    never the text around it), or None."""
    char = None if value is None else refused_character(value, multiline=multiline)
    if char is None:
        return None
    kind = "multi-line text" if multiline else "a single line of text"
    return f"`{field}` must be {kind} without control, format or separator characters (found U+{ord(char):04X})"


def check_display_text(value: str | None, field: str, *, multiline: bool = False) -> None:
    """For a struct's ``__post_init__``: msgspec turns the ``ValueError`` into a 400 naming the
    struct. Code that stores a display string without a struct raises its own error with
    ``display_text_problem``."""
    problem = display_text_problem(value, field, multiline=multiline)
    if problem is not None:
        raise ValueError(problem)
