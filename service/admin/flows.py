"""Admin operations on flows: list with filters, show with history, cancel, expire now, stats.

Cancel and expire go through ``FlowService.finish`` — the same single conditional transition as
every other actor — so an admin racing a completion yields exactly one terminal state, and the
audit event and webhook outbox row are written in that statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.schemas import FlowDetail, FlowPage, ProviderStats, Stats, StatusKindCount
from service.admin.views import delivery_view, event_view, flow_view
from service.db.base import CLIENT_ID, FLOW_ID
from service.db.pagination import keyset, page
from service.errors import FlowNotFound, FlowNotPending, InvalidRequest
from service.flows.models import Flow, FlowEvent
from service.flows.repository import Transition
from service.flows.service import FlowService
from service.flows.states import Actor, FlowStatus
from service.kinds import KIND_NAMES
from service.signals.models import WebhookDelivery


@dataclass(frozen=True, slots=True)
class FlowFilters:
    status: str | None = None
    kind: str | None = None
    server_client: str | None = None
    provider: str | None = None
    subject_iss: str | None = None
    subject_sub: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    expires_after: datetime | None = None
    expires_before: datetime | None = None

    def conditions(self) -> list[Any]:  # noqa: PLR0912 - one branch per filter reads best
        where: list[Any] = []
        if self.status is not None:
            if self.status not in {s.value for s in FlowStatus}:
                raise InvalidRequest("status is not a flow status.")
            where.append(Flow.status == self.status)
        if self.kind is not None:
            if self.kind not in KIND_NAMES:
                raise InvalidRequest("kind is not a flow kind.")
            where.append(Flow.kind == self.kind)
        if self.server_client is not None:
            where.append(Flow.server_client_id == parse_client(self.server_client))
        if self.provider is not None:
            where.append(Flow.provider == self.provider)
        if (self.subject_iss is None) != (self.subject_sub is None) and self.subject_sub is not None:
            raise InvalidRequest("subject_sub needs subject_iss: a sub is unique only per issuer.")
        if self.subject_iss is not None:
            where.append(Flow.subject_iss == self.subject_iss)
        if self.subject_sub is not None:
            where.append(Flow.subject_sub == self.subject_sub)
        if self.created_after is not None:
            where.append(Flow.created_at >= self.created_after)
        if self.created_before is not None:
            where.append(Flow.created_at < self.created_before)
        if self.expires_after is not None:
            where.append(Flow.expires_at >= self.expires_after)
        if self.expires_before is not None:
            where.append(Flow.expires_at < self.expires_before)
        return where


def parse_client(ref: str) -> uuid.UUID:
    client_id = CLIENT_ID.parse(ref)
    if client_id is None:
        raise InvalidRequest("server_client must be an sc_… id.")
    return client_id


def parse_flow(ref: str) -> uuid.UUID:
    flow_id = FLOW_ID.parse(ref)
    if flow_id is None:
        raise FlowNotFound("No flow with this id.")
    return flow_id


def list_statement(filters: FlowFilters, *, cursor: str | None, limit: int) -> Select[Any]:
    """The one SELECT a page costs (its plan is checked by a test: an index scan at any depth)."""
    return keyset(select(Flow).where(*filters.conditions()), Flow.id, cursor, limit)


async def list_flows(session: AsyncSession, filters: FlowFilters, *, cursor: str | None, limit: int) -> FlowPage:
    rows = (await session.execute(list_statement(filters, cursor=cursor, limit=limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda f: f.id)
    return FlowPage(items=[flow_view(f) for f in items], next_cursor=next_cursor)


async def show_flow(flows: FlowService, session: AsyncSession, flow_ref: str) -> FlowDetail:
    flow_id = parse_flow(flow_ref)
    flow = await flows.read(flow_id)  # expires it first when the database clock says so
    if flow is None:
        raise FlowNotFound("No flow with this id.")
    events = (
        (await session.execute(select(FlowEvent).where(FlowEvent.flow_id == flow_id).order_by(FlowEvent.id)))
        .scalars()
        .all()
    )
    deliveries = (
        await session.execute(
            select(WebhookDelivery, (WebhookDelivery.lease_until > func.now()).label("in_flight"))
            .where(WebhookDelivery.flow_id == flow_id)
            .order_by(WebhookDelivery.id)
        )
    ).all()
    return FlowDetail(
        flow=flow_view(flow),
        events=[event_view(e) for e in events],
        webhooks=[_with_lease(d, bool(lease)) for d, lease in deliveries],
        result_shape=None if flow.result is None else shape_of(flow.result),
    )


SHAPE_DEPTH = 4
SHAPE_KEYS = 50
SHAPE_KEY_CHARS = 64


def shape_of(value: Any, depth: int = 0) -> Any:
    """The result's shape: its keys and each value's JSON type, never a value.

    A result may hold anything a kind or a server put there (a consent receipt, an account id), so
    an operator sees what is there, not what it says. Bounded (depth, keys, key length) because a
    caller-supplied result may be large."""
    if isinstance(value, dict):
        if depth >= SHAPE_DEPTH:
            return "object"
        keys = sorted(str(k) for k in value)[:SHAPE_KEYS]
        return {k[:SHAPE_KEY_CHARS]: shape_of(value[k], depth + 1) for k in keys}
    if isinstance(value, list):
        if not value:
            return []
        return ["array"] if depth >= SHAPE_DEPTH else [shape_of(value[0], depth + 1)]
    return _SCALARS.get(type(value), "string")


_SCALARS: dict[type, str] = {bool: "boolean", int: "number", float: "number", type(None): "null"}


def _with_lease(row: WebhookDelivery, in_flight: bool) -> Any:
    view = delivery_view(row)
    if in_flight and view.state == "pending":
        view.state = "in_flight"
    return view


async def finish_flow(
    flows: FlowService,
    flow_ref: str,
    to: FlowStatus,
    *,
    admin_token: str | None,
    operator: Mapping[str, str] | None = None,
) -> Flow:
    """Cancel (only while live) or expire now, as the admin actor, in one conditional statement.

    The event names who: the admin token's id, the console operator (issuer and subject, as their
    sign-in names them), or the CLI."""
    flow_id = parse_flow(flow_ref)
    detail: dict[str, Any]
    if admin_token:
        detail = {"admin_token_id": admin_token}
    elif operator:
        detail = {"via": "console", "operator": dict(operator)}
    else:
        detail = {"via": "cli"}
    if to is FlowStatus.CANCELLED:
        change = Transition(FlowStatus.CANCELLED, Actor.ADMIN, error_code="cancelled_by_admin", detail=detail)
        moved = await flows.finish(flow_id, change)
    else:
        change = Transition(FlowStatus.EXPIRED, Actor.ADMIN, error_code="expired", detail=detail)
        moved = await flows.finish(flow_id, change, require_live=False)
    if moved is not None:
        return moved
    current = await flows.read(flow_id)
    if current is None:
        raise FlowNotFound("No flow with this id.")
    # ``flow_status``: a problem's own ``status`` is the HTTP status (RFC 9457), never the flow's.
    raise FlowNotPending(
        f"The flow is {current.status}; it cannot change again.", extra={"flow_status": current.status}
    )


def parse_window(raw: str | None) -> timedelta:
    from service.admin.tokens import parse_lifetime

    return parse_lifetime(raw or "24h")


async def stats(session: AsyncSession, window: timedelta, *, server_client: str | None = None) -> Stats:
    """Flows created in the window: counts by status and kind; per provider the completion rate
    (completed / created) and the median time from creation to completion. With ``server_client``
    every figure, the webhook backlog included, is that client's alone."""
    client_id = None if server_client is None else parse_client(server_client)
    since: datetime = (await session.execute(select(func.now() - window))).scalar_one()
    in_window = and_(Flow.created_at >= since, *([Flow.server_client_id == client_id] if client_id else []))
    counts = (
        await session.execute(
            select(Flow.status, Flow.kind, func.count())
            .where(in_window)
            .group_by(Flow.status, Flow.kind)
            .order_by(Flow.status, Flow.kind)
        )
    ).all()
    seconds = func.extract("epoch", Flow.completed_at - Flow.created_at)
    completed = Flow.status == "completed"
    providers = (
        await session.execute(
            select(
                Flow.provider,
                func.count(),
                func.count().filter(completed),
                func.percentile_cont(0.5).within_group(seconds).filter(completed),
            )
            .where(in_window)
            .group_by(Flow.provider)
            .order_by(Flow.provider.nulls_first())
        )
    ).all()
    undelivered: list[Any] = [WebhookDelivery.delivered_at.is_(None), WebhookDelivery.abandoned_at.is_(None)]
    if client_id is not None:
        undelivered.append(WebhookDelivery.server_client_id == client_id)
    backlog = (
        await session.execute(select(func.count()).select_from(WebhookDelivery).where(and_(*undelivered)))
    ).scalar_one()
    return Stats(
        window_seconds=int(window.total_seconds()),
        since=since,
        counts=[StatusKindCount(status=s, kind=k, count=int(n)) for s, k, n in counts],
        providers=[
            ProviderStats(
                provider=p,
                created=int(n),
                completed=int(c),
                completion_rate=(round(c / n, 4) if n else None),
                median_seconds_to_complete=(None if m is None else round(float(m), 3)),
            )
            for p, n, c, m in providers
        ],
        webhook_backlog=int(backlog),
    )


async def db_now(session: AsyncSession) -> datetime:
    value: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
    return value
