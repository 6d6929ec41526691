"""The baseline: the smallest honest Litestar endpoint over the same ``flows`` table.

``GET /flows/{id}`` does one primary-key read through the same engine settings elicitd uses
(``service.db.engine.make_engine`` on the same ``Settings``) and returns a few columns as JSON.
No authentication, no expiry check, no view: what any Litestar + SQLAlchemy service pays for a
keyed read, so ``elicitd / baseline`` isolates elicitd's own cost on its hot path.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import msgspec
from litestar import Litestar, get
from litestar.exceptions import NotFoundException
from sqlalchemy import select

from service.db.engine import make_engine, make_sessionmaker
from service.flows.models import Flow
from service.identity import models as _identity_models  # noqa: F401 - flows.server_client_id references it
from service.settings import Settings


class Row(msgspec.Struct):
    id: str
    kind: str
    status: str
    expires_at: datetime
    result: dict[str, object] | None


def create() -> Litestar:
    settings = Settings.from_env()
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)

    @get("/flows/{flow_id:uuid}")
    async def read_flow(flow_id: uuid.UUID) -> Row:
        async with sessions() as session:
            flow = (await session.execute(select(Flow).where(Flow.id == flow_id))).scalars().first()
        if flow is None:
            raise NotFoundException()
        return Row(id=flow.id.hex, kind=flow.kind, status=flow.status, expires_at=flow.expires_at, result=flow.result)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await engine.dispose()

    return Litestar(route_handlers=[read_flow, healthz], lifespan=[lifespan], debug=False, logging_config=None)
