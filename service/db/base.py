"""Declarative base, the constraint naming convention, and time-ordered ids."""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, DateTime, MetaData, Text, cast, func, literal
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Primary keys have no entry: the migrations left them unnamed, so PostgreSQL named them
# ``<table>_pkey``, and declaring another name here would make the models disagree with every database.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


def uuid7() -> uuid.UUID:
    """RFC 9562 UUIDv7: 48-bit Unix milliseconds, then random bits.

    Time-ordered ids keep B-tree inserts append-only and make ``ORDER BY id`` a creation order,
    which the admin API's cursor pagination relies on.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


class PrefixedId:
    """Public ids are ``<prefix>_<32 hex>``: opaque, URL-safe, and self-describing in logs.

    This is the only definition of the format. Statements that write an id themselves (a webhook
    payload built in SQL, the vault owner key rotation recomputes) use :meth:`sql` or
    :meth:`expression`, so the text PostgreSQL produces is the text :meth:`format` produces.
    """

    def __init__(self, prefix: str) -> None:
        # The prefix is inlined into SQL as a literal: only lowercase ASCII letters may be in it.
        if not (prefix.isascii() and prefix.isalpha() and prefix.islower()):
            raise ValueError(f"an id prefix is lowercase ASCII letters, not {prefix!r}")
        self.prefix = prefix + "_"

    def format(self, value: uuid.UUID) -> str:
        return self.prefix + value.hex

    def parse(self, text: str) -> uuid.UUID | None:
        """Return the UUID, or None for anything that is not exactly one of our ids."""
        if not text.startswith(self.prefix):
            return None
        body = text[len(self.prefix) :]
        if len(body) != 32 or not all(c in "0123456789abcdef" for c in body):
            return None
        return uuid.UUID(hex=body)

    def sql(self, column: str) -> str:
        """SQL text formatting the uuid ``column`` as this id, for statements written as text.

        ``column`` is an identifier from code (``t.id``), never input.
        """
        return f"('{self.prefix}' || replace(({column})::text, '-', ''))"

    def expression(self, column: ColumnElement[uuid.UUID]) -> ColumnElement[str]:
        """The same, as a SQLAlchemy expression for statements built with ``select()``."""
        return literal(self.prefix, Text) + func.replace(cast(column, Text), "-", "")


FLOW_ID = PrefixedId("fl")
CLIENT_ID = PrefixedId("sc")
CONNECTION_ID = PrefixedId("cn")
GRANT_ID = PrefixedId("gr")
