"""Every shipped locale translates every message of ``messages.pot``, keeping its placeholders and
markup: a missing or broken translation fails here (and ``make i18n-check``), not on a page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from service.i18n import LANGUAGES, LOCALE_DIR, Language

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
TAG = re.compile(r"</?[a-z]+(?:\s[^>]*)?>")


def _read(path: Path, locale: str | None = None) -> Catalog:
    with path.open("rb") as source:
        return read_po(source, locale=locale)


def _template_ids() -> set[str]:
    return {m.id if isinstance(m.id, str) else m.id[0] for m in _read(LOCALE_DIR / "messages.pot") if m.id}


def _forms(string: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if string is None:
        return ("",)
    return (string,) if isinstance(string, str) else tuple(string)


def catalogue_problems(catalog: Catalog, expected: set[str]) -> list[str]:
    """What is wrong with one locale's catalogue, in words (empty when it is complete)."""
    problems: list[str] = []
    found: set[str] = set()
    for message in catalog:
        if not message.id:
            continue
        singular = message.id if isinstance(message.id, str) else message.id[0]
        found.add(singular)
        ids = _forms(message.id)
        if message.fuzzy:
            problems.append(f"fuzzy: {singular!r}")
        forms = _forms(message.string)
        if isinstance(message.id, tuple) and len(forms) != catalog.num_plurals:
            problems.append(f"{len(forms)} plural forms, the locale has {catalog.num_plurals}: {singular!r}")
        wanted = set().union(*(PLACEHOLDER.findall(i) for i in ids))
        wanted_tags = sorted(TAG.findall(ids[0]))
        for form in forms:
            if not form.strip():
                problems.append(f"untranslated: {singular!r}")
                continue
            # A singular form may leave out the count (``one`` reads "a service", not "1 service").
            if set(PLACEHOLDER.findall(form)) - wanted or wanted - set(PLACEHOLDER.findall(form)) - {"num"}:
                problems.append(f"placeholders {sorted(PLACEHOLDER.findall(form))} ≠ {sorted(wanted)}: {singular!r}")
            if sorted(TAG.findall(form)) != wanted_tags:
                problems.append(f"markup {sorted(TAG.findall(form))} ≠ {wanted_tags}: {singular!r}")
    problems += [f"missing: {m!r}" for m in sorted(expected - found)]
    problems += [f"stale (not in messages.pot): {m!r}" for m in sorted(found - expected)]
    return problems


@pytest.mark.parametrize("language", LANGUAGES, ids=[language.tag for language in LANGUAGES])
def test_every_shipped_catalogue_is_complete(language: Language) -> None:
    catalogue = language.catalogue
    path = LOCALE_DIR / catalogue / "LC_MESSAGES" / "messages.po"
    assert path.is_file(), f"no catalogue for {catalogue}"
    catalog = _read(path, catalogue)
    assert catalog.locale is not None and str(catalog.locale) == catalogue
    assert catalogue_problems(catalog, _template_ids()) == []


def test_the_check_finds_each_kind_of_problem() -> None:
    """The completeness check itself can fail: an empty, a mangled and a missing translation."""
    catalog = Catalog(locale="de")
    catalog.add("Hello %(name)s", "")
    catalog.add("Sign in with %(name)s", "Anmelden mit %(nome)s")
    catalog.add("<strong>%(client)s</strong> asks", "%(client)s fragt")
    problems = catalogue_problems(
        catalog, {"Hello %(name)s", "Sign in with %(name)s", "<strong>%(client)s</strong> asks", "Gone"}
    )
    assert problems == [
        "untranslated: 'Hello %(name)s'",
        "placeholders ['nome'] ≠ ['name']: 'Sign in with %(name)s'",
        "markup [] ≠ ['</strong>', '<strong>']: '<strong>%(client)s</strong> asks'",
        "missing: 'Gone'",
    ]
