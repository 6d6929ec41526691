"""The admin MCP server's tools: the admin API's reads and actions, each call with its audit row.

Each tool runs the very function its admin API route runs (``service.admin.flows``,
``deliveries``, ``grants.operators``, ``diagnosis``), so a rule lives in one place. An acting
tool's row is the one its route writes — same operation id, method, route template, target, role
and status — with actor ``mcp``, no admin token, and the operator (issuer and subject, never the
token) in its detail, as the console's rows name theirs; it is written in the change's own
transaction: no change without its row. A read, and any call that was refused, has its row
written after, in a transaction of its own (nothing changed). Answers are the admin views, which
name every field they show; none holds a secret.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import msgspec
from mcp.server.mcpserver.exceptions import ToolError
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import deliveries, diagnosis, flows
from service.admin.deps import AdminServices
from service.admin.schemas import ReplayResult
from service.admin.tokens import Role
from service.admin_mcp.auth import OperatorToken
from service.db.audit import outcome, write_audit
from service.db.unit import unit_of_work
from service.errors import ElicitdError
from service.grants import operators

logger = logging.getLogger("elicitd.admin_mcp")

T = TypeVar("T")
MAX_LIMIT = 100
STUCK_WINDOW = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Operation:
    """What a call's audit row says it was: the admin API operation it mirrors (method and route
    template too), or the tool's own name where no single route matches (``mcp…``)."""

    operation: str
    method: str | None = None
    route: str | None = None
    target_param: str | None = None

    def target(self, arguments: Mapping[str, Any]) -> str | None:
        if self.target_param is None or arguments.get(self.target_param) is None:
            return None
        return f"{self.target_param}={arguments[self.target_param]}"


# The least role of each tool: tools/list shows a caller only what it may call.
ROLES: dict[str, Role] = {
    "find_flow": Role.VIEWER,
    "explain_tool_failure": Role.VIEWER,
    "list_stuck_webhooks": Role.VIEWER,
    "replay_webhook": Role.OPERATOR,
    "revoke_grant": Role.OPERATOR,
}

LIST_FLOWS = Operation("adminListFlows", "GET", "/admin/v1/flows")
GET_FLOW = Operation("adminGetFlow", "GET", "/admin/v1/flows/{flow_id}", "flow_id")
EXPLAIN = Operation("mcpExplainToolFailure")
STUCK = Operation("mcpListStuckWebhooks")
REPLAY = Operation("adminReplayWebhookDelivery", "POST", "/admin/v1/webhooks/{delivery_id}/replay", "delivery_id")
REVOKE = Operation("adminRevokeGrant", "POST", "/admin/v1/grants/{grant_id}/revoke", "grant_id")
# The row a refused call gets, by tool (an acting tool's is its route's).
REFUSED_AS: dict[str, Operation] = {"replay_webhook": REPLAY, "revoke_grant": REVOKE}


def who(operator: OperatorToken) -> dict[str, Any]:
    """The operator as the row names them, as the console's rows do: issuer and subject."""
    return {"operator": {"iss": operator.issuer, "sub": operator.subject}}


def _row(operator: OperatorToken, op: Operation, arguments: Mapping[str, Any], status: int) -> dict[str, Any]:
    return {
        "actor": "mcp",
        "operation": op.operation,
        "role": operator.role.label,
        "method": op.method,
        "route": op.route,
        "target": op.target(arguments),
        "status": status,
        "detail": who(operator),
    }


async def write_refusal(
    services: AdminServices, operator: OperatorToken, tool: str, arguments: Mapping[str, Any], status: int
) -> None:
    """The row of a call refused before it ran (its role too low): the route's row, with 403."""
    op = REFUSED_AS[tool]
    async with unit_of_work(services.sessions) as session:
        await write_audit(session, **_row(operator, op, arguments, status))


def _tool_error(error: BaseException) -> ToolError:
    """What the caller reads: the refusal's fixed sentence and code; for anything else, nothing of
    the error itself (a database error's text may hold a statement's values)."""
    if isinstance(error, ElicitdError):
        return ToolError(f"{error.detail} ({error.problem_code})")
    logger.error("admin tool failed", extra={"error_type": type(error).__name__})
    return ToolError("The tool failed on the server (internal_error); the server log says why.")


async def audited(
    services: AdminServices,
    operator: OperatorToken,
    op: Operation,
    arguments: Mapping[str, Any],
    work: Callable[[AsyncSession], Awaitable[T]],
    *,
    changes: bool,
) -> dict[str, Any]:
    """Run ``work`` in one unit of work and write the call's row (see the module docstring)."""
    try:
        async with unit_of_work(services.sessions) as session:
            result = await work(session)
            if changes:
                await write_audit(session, **_row(operator, op, arguments, 200))
    except Exception as error:
        status, _ = outcome(error)
        try:
            async with unit_of_work(services.sessions) as session:
                await write_audit(session, **_row(operator, op, arguments, status))
        except Exception as lost:  # the refusal stands; the lost row is logged
            logger.error("admin audit write failed", extra={"error_type": type(lost).__name__})
        raise _tool_error(error) from None
    if not changes:
        async with unit_of_work(services.sessions) as session:
            await write_audit(session, **_row(operator, op, arguments, 200))
    answer: dict[str, Any] = msgspec.to_builtins(result)
    return answer


def _limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"limit is between 1 and {MAX_LIMIT}.")
    return limit


async def find_flow(
    services: AdminServices, operator: OperatorToken, arguments: Mapping[str, Any], filters: flows.FlowFilters
) -> dict[str, Any]:
    flow_id = arguments.get("flow_id")
    if flow_id:

        async def one(session: AsyncSession) -> Any:
            return await flows.show_flow(services.flows, session, flow_id)

        return await audited(services, operator, GET_FLOW, arguments, one, changes=False)
    limit = _limit(int(arguments.get("limit") or 20))

    async def search(session: AsyncSession) -> Any:
        return await flows.list_flows(session, filters, cursor=arguments.get("cursor"), limit=limit)

    return await audited(services, operator, LIST_FLOWS, arguments, search, changes=False)


async def explain(services: AdminServices, operator: OperatorToken, arguments: Mapping[str, Any]) -> dict[str, Any]:
    async def run(session: AsyncSession) -> Any:
        return await diagnosis.diagnose(
            session,
            iss=arguments["subject_iss"],
            sub=arguments["subject_sub"],
            provider=arguments.get("provider"),
            server_client=arguments.get("server_client"),
        )

    return await audited(services, operator, EXPLAIN, arguments, run, changes=False)


async def stuck_webhooks(
    services: AdminServices, operator: OperatorToken, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """Abandoned deliveries, and waiting ones (an attempt in flight included) that failed at least
    once, newest first, with the whole backlog."""
    limit = _limit(int(arguments.get("limit") or 20))
    client = arguments.get("server_client")

    async def run(session: AsyncSession) -> Any:
        abandoned = await deliveries.list_deliveries(
            session, state="abandoned", server_client=client, flow=None, cursor=None, limit=limit
        )
        waiting = [
            d
            for state in ("in_flight", "pending")
            for d in (
                await deliveries.list_deliveries(
                    session, state=state, server_client=client, flow=None, cursor=None, limit=MAX_LIMIT
                )
            ).items
        ]
        backlog = (await flows.stats(session, STUCK_WINDOW, server_client=client)).webhook_backlog
        return {
            "backlog": backlog,
            "abandoned": abandoned.items,
            "failing": sorted((d for d in waiting if d.attempts > 0), key=lambda d: d.id, reverse=True)[:limit],
        }

    return await audited(services, operator, STUCK, arguments, run, changes=False)


async def replay(services: AdminServices, operator: OperatorToken, delivery_id: str) -> dict[str, Any]:
    async def run(session: AsyncSession) -> ReplayResult:
        return ReplayResult(delivery=await deliveries.replay(session, delivery_id))

    answer = await audited(services, operator, REPLAY, {"delivery_id": delivery_id}, run, changes=True)
    services.webhooks.wake()
    return answer


async def revoke_grant(services: AdminServices, operator: OperatorToken, grant_id: str) -> dict[str, Any]:
    async def run(session: AsyncSession) -> Any:
        return await operators.revoke_grant(session, grant_id)

    return await audited(services, operator, REVOKE, {"grant_id": grant_id}, run, changes=True)
