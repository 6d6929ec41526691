"""What admin handlers share: one committed session per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

if TYPE_CHECKING:
    from service.services import Services


@asynccontextmanager
async def unit(services: Services) -> AsyncIterator[AsyncSession]:
    """One session per admin call, committed only when the operation succeeded."""
    async with services.sessions() as session:
        yield session
        await session.commit()
