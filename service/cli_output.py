"""How ``elicitd`` commands print: a table for people, one JSON document with ``--json`` for scripts.

Both forms write each value one way whatever produced it (a database row, an API view already
turned into builtins). In a table a timestamp is always UTC to the second
(``2026-05-04T09:30:00Z``), a missing value or ``false`` is an empty cell, ``true`` is ``yes``, a
list is comma-separated. In JSON a timestamp is RFC 3339 in UTC with its full precision
(``2026-05-04T09:30:00.123456Z``), as the API writes it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

# An ISO 8601 timestamp as msgspec and the API write it, with an offset or ``Z``.
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:?\d{2}|Z)$")


def timestamp(value: datetime) -> str:
    """The one timestamp format of the CLI: UTC, to the second."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parsed_timestamp(value: str) -> datetime | None:
    if not _TIMESTAMP.match(value):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def cell(value: Any) -> str:  # noqa: PLR0911 - one return per kind of value
    """One table cell."""
    if value is None or value is False:
        return ""
    if value is True:
        return "yes"
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, str):
        parsed = _parsed_timestamp(value)
        return timestamp(parsed) if parsed is not None else value
    if isinstance(value, Mapping):
        return json.dumps(_plain(value), separators=(",", ":"), sort_keys=True) if value else ""
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(item) for item in value)
    return str(value)


def _plain(value: Any) -> Any:
    """Builtins for JSON; datetimes as the API writes them."""
    if isinstance(value, datetime):
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return utc.isoformat().replace("+00:00", "Z")
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item) for item in value]
    if isinstance(value, date | uuid.UUID):
        return str(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def dump_json(value: Any) -> str:
    return json.dumps(_plain(value), indent=2)


def print_json(value: Any) -> None:
    print(dump_json(value))


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, as_json: bool = False) -> None:
    """Readable columns for people, ``--json`` (one document) for scripts."""
    if as_json:
        print_json(list(rows))
        return
    if not rows:
        print("(none)")
        return
    cells = [[cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    print("  ".join(column.upper().ljust(widths[i]) for i, column in enumerate(columns)).rstrip())
    for line in cells:
        print("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())


def print_record(record: Mapping[str, Any], fields: Sequence[str] | None = None) -> None:
    """One object as a two-column table (field, value): how ``show`` commands print. Nested
    objects are flattened with dots (``subject.iss``)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value and prefix not in {"context", "detail"}:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value

    for key in fields if fields is not None else list(record):
        walk(key, record.get(key))
    width = max((len(key) for key in flat), default=0)
    for key, value in flat.items():
        print(f"{key.ljust(width)}  {cell(value)}".rstrip())


def print_document(document: Mapping[str, Any], tables: Mapping[str, Sequence[str]] | None = None) -> None:
    """A ``show`` result: its fields as a two-column table, then each list of objects in it
    (a client's keys, a flow's events) as a table of its own under its name. ``tables`` picks
    the columns of such a list (default: every key of its first item)."""
    lists = {
        key: value
        for key, value in document.items()
        if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value)
    }
    print_record(document, [key for key in document if key not in lists])
    for key, rows in lists.items():
        print()
        print(key.upper())
        print_table(rows, (tables or {}).get(key) or list(rows[0]))


def report(as_json: bool, document: Mapping[str, Any], line: str) -> None:
    """A command's one-line outcome, or the same as a JSON document with ``--json``."""
    if as_json:
        print_json(document)
    else:
        print(line)
