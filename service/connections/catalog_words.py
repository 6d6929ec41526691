"""The catalog's words for the pages' catalogues: a Babel extractor for the provider entry files.

``make i18n-extract`` (babel.cfg) runs it over ``providers_catalog/*.yaml``: each scope's plain
words and each parameter's title become a msgid, so a translator sees them with every other page
string and ``describe_scope`` finds them through ``_()`` as it did when they were Python literals.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import IO, Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def extract(
    fileobj: IO[bytes], keywords: Mapping[str, Any], comment_tags: Collection[str], options: Mapping[str, Any]
) -> Iterator[tuple[int, str, str, list[str]]]:
    """Babel's extractor protocol: (line, function, message, comments) for each text to translate."""
    del keywords, comment_tags, options
    document = yaml.load(fileobj.read().decode("utf-8"), Loader=_LOADER)  # noqa: S506 - a safe loader
    if not isinstance(document, dict):
        return
    for words in (document.get("scopes") or {}).values():
        if isinstance(words, str):
            yield 0, "N_", words, []
    for spec in (document.get("parameters") or {}).values():
        if isinstance(spec, dict) and isinstance(spec.get("title"), str):
            yield 0, "N_", spec["title"], []
    for spec in ((document.get("api_key") or {}).get("fields") or {}).values():
        if isinstance(spec, dict) and isinstance(spec.get("title"), str):
            yield 0, "N_", spec["title"], []
