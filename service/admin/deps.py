"""What admin handlers share: one committed session per call, and the app's flow service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.flows.service import FlowService


@asynccontextmanager
async def unit(request: Request[Any, Any, Any]) -> AsyncIterator[AsyncSession]:
    """One session per admin call, committed only when the operation succeeded."""
    async with request.app.state.sessions() as session:
        yield session
        await session.commit()


def flow_service(request: Request[Any, Any, Any]) -> FlowService:
    return request.app.state.flows  # type: ignore[no-any-return]
