"""Admin authentication, role checks and the audit trail.

Every admin route declares the least role it needs (``opt={"role": Role.OPERATOR}``; the default
is viewer). The guard authenticates the bearer token (401 for missing, unknown, revoked or
expired tokens alike) and then checks the role (403). The row holds the token's id, never the
token, and the route template plus path parameters, never the query string or body.

Each authenticated call has one ``admin_audit_log`` row, written *before* the response starts:

* a call that changes something (POST, PUT, PATCH, DELETE) writes its row inside the first
  transaction the action commits (``before_commit`` on the session, so every service's own unit
  of work carries it, wherever the action happens). If the row cannot be written, the action's
  change is rolled back with it: no change without its audit row. The row first holds the
  route's success status; should the call then answer otherwise, the status is corrected;
* a read, a refused call (403) or a change that committed nothing is written after the handler,
  as before: nothing changed, so a failure there is logged and the answer stands;
* an anonymous call (no valid token, 401) writes no row: anyone could otherwise grow the table
  without limit. The server log and the request metrics still count them.
"""

from __future__ import annotations

import json
import logging
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

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


_INSERT = text(
    "INSERT INTO admin_audit_log (id, admin_token_id, actor, role, operation, method, route, target, "
    "status, detail) VALUES (:id, :token, :actor, :role, :op, :method, :route, :target, :status, "
    "CAST(:detail AS jsonb))"
)


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
        _INSERT,
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


_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class _PendingAudit:
    """The row a mutating call owes, until the first commit of its action writes it."""

    scope: Any
    row_id: uuid.UUID | None = None
    status: int | None = None


_pending: ContextVar[_PendingAudit | None] = ContextVar("elicitd_admin_audit", default=None)
_hook_installed = False


def _audit_values(scope: Any, status: int | None) -> dict[str, Any] | None:
    """The row's columns, or None for an anonymous call (no principal)."""
    principal: AdminPrincipal | None = scope["state"].get(_PRINCIPAL)
    if principal is None:
        return None
    handler = scope.get("route_handler")
    params = scope.get("path_params") or {}
    return {
        "id": uuid7(),
        "token": principal.token_id,
        "actor": "api",
        "role": principal.role.label,
        "op": str(getattr(handler, "operation_id", None) or "unknown"),
        "method": scope.get("method"),
        "route": scope.get("path_template"),
        "target": ",".join(f"{k}={v}" for k, v in sorted(params.items())) or None,
        "status": status,
        "detail": "{}",
    }


def _write_in_commit(session: Session) -> None:
    """``before_commit`` of every session: the pending admin call's row joins this transaction.

    Runs inside SQLAlchemy's greenlet, so the synchronous ``execute`` is the async session's own
    connection; an error here fails the commit, and the action's change is rolled back with it.
    The guard's own token lookup commits before the principal is known, so it carries no row."""
    pending = _pending.get()
    if pending is None or pending.row_id is not None:
        return
    handler = pending.scope.get("route_handler")
    values = _audit_values(pending.scope, getattr(handler, "status_code", None))
    if values is None:
        return
    session.execute(_INSERT, values)
    pending.row_id, pending.status = values["id"], values["status"]


def _install_commit_hook() -> None:
    global _hook_installed  # noqa: PLW0603 - one listener per process, on the Session class
    if not _hook_installed:
        event.listen(Session, "before_commit", _write_in_commit)
        _hook_installed = True


class AdminAuditMiddleware:
    """ASGI middleware on the admin router (inside routing, so the handler and template are known)."""

    def __init__(self, app: Any, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.app = app
        self._sessions = sessions
        _install_commit_hook()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending = _PendingAudit(scope) if scope.get("method") in _MUTATING else None
        token = _pending.set(pending)
        written = False

        async def audited_send(message: Any) -> None:
            nonlocal written
            if message["type"] == "http.response.start" and not written:
                written = True
                await self._settle(scope, pending, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, audited_send)
        finally:
            _pending.reset(token)

    async def _settle(self, scope: Any, pending: _PendingAudit | None, status: int) -> None:
        """After the handler: correct the status of a row written in the action's transaction, or
        write the row of a call that committed nothing (a read, a refusal, a change that was not)."""
        _pending.set(None)  # the commit below is this bookkeeping's own, not the action's
        if pending is not None and pending.row_id is not None:
            if pending.status == status:
                return
            statement, values = _SET_STATUS, {"id": pending.row_id, "status": status}
        else:
            found = _audit_values(scope, status)
            if found is None:
                return  # anonymous: no row
            statement, values = _INSERT, found
        try:
            async with unit_of_work(self._sessions) as session:
                await session.execute(statement, values)
        except Exception as exc:  # nothing changed in this call (or its row exists): the answer stands
            logger.error("admin audit write failed", extra={"error_type": type(exc).__name__})


_SET_STATUS = text("UPDATE admin_audit_log SET status = :status WHERE id = :id")
