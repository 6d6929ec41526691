"""Migration tests get empty databases of their own: they migrate, race and downgrade them, and the
shared session database must stay at head for everyone else."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from service.settings import normalize_database_url
from tests.support import backends


@pytest.fixture
async def new_database(backend: backends.Backends) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """Creates empty databases (SQLAlchemy asyncpg URLs); all are dropped after the test."""
    created: list[str] = []

    async def create() -> str:
        created.append(await backends.create_database(backend.server_url))
        return normalize_database_url(created[-1])

    yield create
    for url in created:
        await backends.drop_database(backend.server_url, url)


@pytest.fixture
async def empty_database(new_database: Callable[[], Awaitable[str]]) -> str:
    return await new_database()
