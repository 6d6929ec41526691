"""What the pages and the asset routes ask of brands, each in its own short unit of work."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.branding import store
from service.branding.store import ShownBrand


class BrandService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def for_client(self, client_id: uuid.UUID) -> ShownBrand | None:
        async with self._sessions() as session:
            row = await store.brand_for_client(session, client_id)
        return None if row is None else store.shown(row)

    async def logo(self, sha256: str) -> bytes | None:
        async with self._sessions() as session:
            return await store.logo_png(session, sha256)

    async def style(self, sha256: str) -> str | None:
        async with self._sessions() as session:
            return await store.style_of(session, sha256)
