"""The unit of work: the one place a transaction is committed.

A service opens a unit, makes its changes through repositories (each a single conditional
statement), and the unit commits when the block ends normally; an exception leaves the block
without a commit, so the session closes and PostgreSQL rolls everything back. Repositories, page
handlers and commands never commit themselves: where a change becomes visible to other requests
and replicas is always the end of an ``async with unit_of_work(...)`` block.

No network call belongs inside a unit: the session holds a pooled connection (and any row locks)
until the block ends, so a slow provider would hold them too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


@contextlib.asynccontextmanager
async def unit_of_work(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A session whose work is committed when the block succeeds and discarded when it raises."""
    async with sessions() as session:
        yield session
        await session.commit()
