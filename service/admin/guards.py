"""Admin authentication, role checks and the audit trail.

Every admin route declares the least role it needs (``opt={"role": Role.OPERATOR}``; the default
is viewer). The guard authenticates the bearer token (401 for missing, unknown, revoked or
expired tokens alike) and then checks the role (403). The row holds the token's id, never the
token, and the route template plus path parameters, never the query string or body.

Each authenticated call has one ``admin_audit_log`` row, written *before* the response starts:

* a call that changes something (POST, PUT, PATCH, DELETE) writes its row inside the first
  transaction the action commits having changed something (``before_commit`` on the session, so
  every service's own unit of work carries it, wherever the action happens). If the row cannot be written, the action's
  change is rolled back with it: no change without its audit row. The row holds the route's
  success status; should the call then answer otherwise, a second row says what it answered
  (``detail.corrects`` names the first): rows are links of a hash chain, never updated;
* a read, a refused call (403) or a change that committed nothing is written after the handler,
  as before: nothing changed, so a failure there is logged and the answer stands;
* an anonymous call (no valid token, 401) writes no row: anyone could otherwise grow the table
  without limit. The server log and the request metrics still count them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from service.admin.audit import AUDIT_ID
from service.admin.tokens import AdminPrincipal, Role, authenticate
from service.db.audit import INSERT, INSERT_IF_CHANGED, audit_row, correction_row
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


_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


# A call's row from its ASGI scope and the status it answered (None: the status the route answers
# on success, as the action commits before the response starts); None for a call that owes no row.
AuditRowOf = Callable[[Any, int | None], dict[str, Any] | None]


@dataclass
class _PendingAudit:
    """The row a mutating call owes, until the first commit of its action writes it."""

    scope: Any
    row_of: AuditRowOf
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
    if status is None:
        status = getattr(handler, "status_code", None)
    params = scope.get("path_params") or {}
    return audit_row(
        actor="api",
        operation=str(getattr(handler, "operation_id", None) or "unknown"),
        token_id=principal.token_id,
        role=principal.role.label,
        method=scope.get("method"),
        route=scope.get("path_template"),
        target=",".join(f"{k}={v}" for k, v in sorted(params.items())) or None,
        status=status,
    )


def _write_in_commit(session: Session) -> None:
    """``before_commit`` of every session: the pending admin call's row joins this transaction.

    Runs inside SQLAlchemy's greenlet, so the synchronous ``execute`` is the async session's own
    connection; an error here fails the commit, and the action's change is rolled back with it.
    The guard's own token lookup commits before the principal is known, so it carries no row."""
    pending = _pending.get()
    if pending is None or pending.row_id is not None:
        return
    values = pending.row_of(pending.scope, None)
    if values is None:
        return
    if session.execute(INSERT_IF_CHANGED, values).rowcount:  # type: ignore[attr-defined]
        pending.row_id, pending.status = values["id"], values["status"]


def _install_commit_hook() -> None:
    global _hook_installed  # noqa: PLW0603 - one listener per process, on the Session class
    if not _hook_installed:
        event.listen(Session, "before_commit", _write_in_commit)
        _hook_installed = True


class AdminAuditMiddleware:
    """ASGI middleware on the admin router (inside routing, so the handler and template are known).

    ``row_of`` makes a call's row; the console's router passes its own (``service.console.audit``),
    so a console action's row is written by this same mechanism, in its change's transaction."""

    def __init__(
        self, app: Any, sessions: async_sessionmaker[AsyncSession], row_of: AuditRowOf = _audit_values
    ) -> None:
        self.app = app
        self._sessions = sessions
        self._row_of = row_of
        _install_commit_hook()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending = _PendingAudit(scope, self._row_of) if scope.get("method") in _MUTATING else None
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
        """After the handler: a correcting row when the call answered otherwise than the row written
        in its action's transaction says, or the row of a call that committed nothing (a read, a
        refusal, a change that was not)."""
        _pending.set(None)  # the commit below is this bookkeeping's own, not the action's
        found = self._row_of(scope, status)
        if pending is not None and pending.row_id is not None:
            if found is None or pending.status == found["status"]:
                return
            values = correction_row(found, AUDIT_ID.format(pending.row_id))
        else:
            if found is None:
                return  # anonymous: no row
            values = found
        try:
            async with unit_of_work(self._sessions) as session:
                await session.execute(INSERT, values)
        except Exception as exc:  # nothing changed in this call (or its row exists): the answer stands
            logger.error("admin audit write failed", extra={"error_type": type(exc).__name__})
