"""Keyset pagination over UUIDv7 ids.

UUIDv7 ids are creation-ordered, so "newest first" is ``ORDER BY id DESC`` and the cursor is the
last id seen: the next page is ``id < :cursor``. Unlike OFFSET this is an index range scan however
deep the page, and rows inserted while someone pages appear only *before* the first page (their
ids are newer), so no row is skipped or repeated across page boundaries.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import Select

from service.errors import InvalidRequest

T = TypeVar("T")

MAX_LIMIT = 500


def encode_cursor(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> uuid.UUID | None:
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if len(raw) != 16:
            raise ValueError
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError):
        raise InvalidRequest("cursor is not one this API returned.", extra={"code": "invalid_cursor"}) from None


def keyset(stmt: Select[Any], id_column: Any, cursor: str | None, limit: int) -> Select[Any]:
    """Apply the cursor and fetch one extra row to learn whether another page exists."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}.")
    after = decode_cursor(cursor)
    if after is not None:
        stmt = stmt.where(id_column < after)
    return stmt.order_by(id_column.desc()).limit(limit + 1)


def page(rows: Sequence[T], limit: int, id_of: Any) -> tuple[list[T], str | None]:
    items = list(rows[:limit])
    more = len(rows) > limit
    return items, (encode_cursor(id_of(items[-1])) if more and items else None)
