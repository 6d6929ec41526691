"""Admin authentication, role checks and the audit trail.

Every admin route declares the least role it needs (``opt={"role": Role.OPERATOR}``; the default
is viewer). The guard authenticates the bearer token (401 for missing, unknown, revoked or
expired tokens alike) and then checks the role (403). The audit middleware writes one
``admin_audit_log`` row per call — including refused ones — *before* the response starts, so
a caller that saw an answer can rely on its audit row existing. The row holds the token's id,
never the token, and the route template plus path parameters, never the query string or body.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admin.tokens import AdminPrincipal, Role, authenticate
from service.db.base import uuid7
from service.db.unit import unit_of_work

logger = logging.getLogger("elicitd.admin")

_PRINCIPAL = "elicitd.admin"


class AdminGuard:
    """Authenticates the admin token and checks the route's least role (``opt["role"]``)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    def __deepcopy__(self, memo: dict[int, Any]) -> AdminGuard:
        return self  # Litestar copies routers when it registers them; the session factory is shared

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        # A refused token matched no row, so there is nothing to keep when ``authenticate`` raises.
        async with unit_of_work(self._sessions) as session:
            principal = await authenticate(session, connection.headers.get("authorization"))
        connection.scope["state"][_PRINCIPAL] = principal
        principal.require(handler.opt.get("role", Role.VIEWER))


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> AdminPrincipal:
    principal: AdminPrincipal = connection.scope["state"][_PRINCIPAL]
    return principal


async def write_audit(
    session: AsyncSession,
    *,
    actor: str,
    operation: str,
    principal: AdminPrincipal | None = None,
    method: str | None = None,
    route: str | None = None,
    target: str | None = None,
    status: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    await session.execute(
        text(
            "INSERT INTO admin_audit_log (id, admin_token_id, actor, role, operation, method, route, target, "
            "status, detail) VALUES (:id, :token, :actor, :role, :op, :method, :route, :target, :status, "
            "CAST(:detail AS jsonb))"
        ),
        {
            "id": uuid7(),
            "token": None if principal is None else principal.token_id,
            "actor": actor,
            "role": None if principal is None else principal.role.label,
            "op": operation,
            "method": method,
            "route": route,
            "target": target,
            "status": status,
            "detail": json.dumps(detail or {}),
        },
    )


class AdminAuditMiddleware:
    """ASGI middleware on the admin router (inside routing, so the handler and template are known)."""

    def __init__(self, app: Any, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.app = app
        self._sessions = sessions

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        written = False

        async def audited_send(message: Any) -> None:
            nonlocal written
            if message["type"] == "http.response.start" and not written:
                written = True
                await self._audit(scope, int(message["status"]))
            await send(message)

        await self.app(scope, receive, audited_send)

    async def _audit(self, scope: Any, status: int) -> None:
        handler = scope.get("route_handler")
        operation = getattr(handler, "operation_id", None)
        params = scope.get("path_params") or {}
        target = ",".join(f"{k}={v}" for k, v in sorted(params.items())) or None
        sessions = self._sessions
        try:
            async with unit_of_work(sessions) as session:
                await write_audit(
                    session,
                    actor="api",
                    operation=str(operation or "unknown"),
                    principal=scope["state"].get(_PRINCIPAL),
                    method=scope.get("method"),
                    route=scope.get("path_template"),
                    target=target,
                    status=status,
                )
        except Exception as exc:  # an audit failure is logged loudly; the answer is already decided
            logger.error("admin audit write failed", extra={"error_type": type(exc).__name__})
