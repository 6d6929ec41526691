"""What admin handlers share: one unit of work per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from service.db.unit import unit_of_work

if TYPE_CHECKING:
    from service.services import Services


@asynccontextmanager
async def unit(services: Services) -> AsyncIterator[AsyncSession]:
    """One session per admin call, committed only when the operation succeeded."""
    async with unit_of_work(services.sessions) as session:
        yield session
