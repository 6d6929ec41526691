"""A console action's audit row: the one the matching admin API call writes, but for its actor.

A mutating console route names the admin API operation it mirrors (``opt={"audit":
"adminCancelFlow"}``) and takes the path parameters that operation's route names. Its row then
carries that operation's id, method and route template, the same ``target`` (those parameters),
the operator's role and the status the API would have answered — the route's success status when
the console answered with its redirect or page, the refusal's status otherwise — and differs
only in ``actor`` (``console``), no admin token, and ``detail.operator`` (issuer and subject of who
acted). It is written by the admin API's own mechanism (``service.admin.guards``): in the first
transaction the action commits, so no change is kept without its row.

A console route without ``audit`` writes no row (reading pages is not an admin API call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Litestar
from litestar.routes import HTTPRoute

from service.console.auth import Operator
from service.db.audit import audit_row

OPERATOR_STATE = "elicitd.console.operator"
_API_PREFIX = "/admin/"


@dataclass(frozen=True, slots=True)
class ApiOperation:
    """What an admin API operation's row says about the call: method, route template, parameters."""

    operation: str
    method: str
    route: str
    params: frozenset[str]
    status: int


_by_app: dict[int, dict[str, ApiOperation]] = {}


def api_operations(app: Litestar) -> dict[str, ApiOperation]:
    """Every admin API operation by its id, read from the app's own routes (cached per app)."""
    found = _by_app.get(id(app))
    if found is None:
        found = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute) or not route.path.startswith(_API_PREFIX):
                continue
            for handler in route.route_handlers:
                methods = sorted(set(handler.http_methods) - {"OPTIONS", "HEAD"})
                if handler.operation_id and methods:
                    found[str(handler.operation_id)] = ApiOperation(
                        operation=str(handler.operation_id),
                        method=methods[0],
                        route=route.path_format,
                        params=frozenset(route.path_parameters),
                        status=handler.status_code,
                    )
        _by_app[id(app)] = found
    return found


def mirrored(app: Litestar, operation: str) -> ApiOperation:
    """The API operation a console route names; ``LookupError`` for an id no API route has."""
    found = api_operations(app).get(operation)
    if found is None:
        raise LookupError(f"console route names audit operation {operation!r}, which no admin API route has")
    return found


def console_row(scope: Any, status: int | None) -> dict[str, Any] | None:
    """The row of a console call (``service.admin.guards.AuditRowOf``), or None when it owes none."""
    operator: Operator | None = scope["state"].get(OPERATOR_STATE)
    handler = scope.get("route_handler")
    operation = None if handler is None else handler.opt.get("audit")
    if operator is None or not operation:
        return None
    api = mirrored(scope["app"], str(operation))
    params = scope.get("path_params") or {}
    target = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k in api.params) or None
    # The console answers a success with a redirect (or a page); the API with its route's status.
    recorded = api.status if status is None or 200 <= status < 400 else status
    return audit_row(
        actor="console",
        operation=api.operation,
        role=operator.role.label,
        method=api.method,
        route=api.route,
        target=target,
        status=recorded,
        detail={"operator": operator.who},
    )
