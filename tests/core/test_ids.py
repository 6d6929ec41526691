"""Public ids: one definition, and PostgreSQL writes them exactly as Python does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Uuid, bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from service.db.base import CLIENT_ID, CONNECTION_ID, FLOW_ID, PrefixedId, uuid7
from service.settings import normalize_database_url

IDS = [FLOW_ID, CLIENT_ID, CONNECTION_ID, PrefixedId("evt")]
VALUES = [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.UUID("0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"), uuid7()]


def test_format_and_parse() -> None:
    value = uuid.UUID("0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
    assert FLOW_ID.format(value) == "fl_0190a3c45e6f7a8b9c0d1e2f3a4b5c6d"
    assert FLOW_ID.parse("fl_0190a3c45e6f7a8b9c0d1e2f3a4b5c6d") == value
    for wrong in (
        "sc_0190a3c45e6f7a8b9c0d1e2f3a4b5c6d",
        "fl_0190A3C45E6F7A8B9C0D1E2F3A4B5C6D",
        "fl_0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "fl_0190a3c45e6f7a8b9c0d1e2f3a4b5c6",
        "fl_0190a3c45e6f7a8b9c0d1e2f3a4b5c6d0",
        "0190a3c45e6f7a8b9c0d1e2f3a4b5c6d",
    ):
        assert FLOW_ID.parse(wrong) is None


@pytest.mark.parametrize("prefix", ["", "FL", "f_l", "fl'", "fl; --", "é"])
def test_a_prefix_that_cannot_be_a_sql_literal_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="lowercase ASCII letters"):
        PrefixedId(prefix)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(normalize_database_url(database_url))
    yield engine
    await engine.dispose()


@pytest.mark.parametrize("ids", IDS, ids=lambda i: i.prefix)
async def test_sql_forms_match_python(engine: AsyncEngine, ids: PrefixedId) -> None:
    as_text = text(f"SELECT {ids.sql('CAST(:v AS uuid)')}")
    as_expression = select(ids.expression(bindparam("v", type_=Uuid())))
    async with engine.connect() as connection:
        for value in VALUES:
            assert (await connection.execute(as_text, {"v": value})).scalar_one() == ids.format(value)
            assert (await connection.execute(as_expression, {"v": value})).scalar_one() == ids.format(value)
