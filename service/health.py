"""Liveness and readiness. Readiness reports PostgreSQL and Redis separately: without Redis the
service still works (by polling), so it stays ready and says it is degraded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from litestar import Response, get
from sqlalchemy import text

if TYPE_CHECKING:
    from service.services import Services


class Readiness(msgspec.Struct):
    status: str
    postgres: str
    redis: str
    wakeups: str


@get("/healthz", operation_id="healthz", tags=["ops"], summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", operation_id="readyz", tags=["ops"], summary="Readiness: PostgreSQL and Redis, reported apart")
async def readyz(services: Services) -> Response[Readiness]:
    state = services
    try:
        async with state.sessions() as session:
            await session.execute(text("SELECT 1"))
        postgres = "ok"
    except Exception:  # any failure means "not ready"; the reason is in the server log, not here
        postgres = "down"
    hub = state.hub
    redis = "not_configured"
    if hub.redis_configured:
        redis = "ok" if await hub.ping() else "down"
    wakeups = "redis" if hub.healthy else "polling"
    ready = postgres == "ok"
    body = Readiness(status="ready" if ready else "unavailable", postgres=postgres, redis=redis, wakeups=wakeups)
    return Response(body, status_code=200 if ready else 503)
