"""Admin view of completion webhooks: list deliveries (with their state) and replay one."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.flows import parse_client, parse_flow
from service.admin.schemas import WebhookDeliveryView, WebhookPage
from service.admin.views import DELIVERY_ID, delivery_view
from service.db.pagination import keyset, page
from service.errors import Conflict, InvalidRequest, NotFound
from service.signals.models import WebhookDelivery

DeliveryState = Literal["pending", "in_flight", "delivered", "abandoned"]


class DeliveryNotFound(NotFound):
    code = "webhook_delivery_not_found"
    title = "Webhook delivery not found"


def _in_flight() -> Any:
    return (WebhookDelivery.lease_until > func.now()).label("in_flight")


def _view(row: Any) -> WebhookDeliveryView:
    delivery, in_flight = row
    view = delivery_view(delivery)
    if in_flight and view.state == "pending":
        view.state = "in_flight"
    return view


async def list_deliveries(
    session: AsyncSession,
    *,
    state: str | None,
    server_client: str | None,
    flow: str | None,
    cursor: str | None,
    limit: int,
) -> WebhookPage:
    stmt = select(WebhookDelivery, _in_flight())
    if state == "delivered":
        stmt = stmt.where(WebhookDelivery.delivered_at.is_not(None))
    elif state == "abandoned":
        stmt = stmt.where(WebhookDelivery.abandoned_at.is_not(None))
    elif state in {"pending", "in_flight"}:
        stmt = stmt.where(WebhookDelivery.delivered_at.is_(None), WebhookDelivery.abandoned_at.is_(None))
        leased = WebhookDelivery.lease_until > func.now()
        stmt = stmt.where(leased if state == "in_flight" else ~leased | WebhookDelivery.lease_until.is_(None))
    elif state is not None:
        raise InvalidRequest("state must be pending, in_flight, delivered or abandoned.")
    if server_client is not None:
        stmt = stmt.where(WebhookDelivery.server_client_id == parse_client(server_client))
    if flow is not None:
        stmt = stmt.where(WebhookDelivery.flow_id == parse_flow(flow))
    rows = (await session.execute(keyset(stmt, WebhookDelivery.id, cursor, limit))).all()
    items, next_cursor = page(rows, limit, lambda r: r[0].id)
    return WebhookPage(items=[_view(r) for r in items], next_cursor=next_cursor)


async def show_delivery(session: AsyncSession, ref: str) -> WebhookDeliveryView:
    delivery_id = DELIVERY_ID.parse(ref)
    row = None
    if delivery_id is not None:
        row = (
            await session.execute(
                select(WebhookDelivery, _in_flight())
                .where(WebhookDelivery.id == delivery_id)
                .execution_options(populate_existing=True)
            )
        ).first()
    if row is None:
        raise DeliveryNotFound("No webhook delivery with this id.")
    return _view(row)


async def replay(session: AsyncSession, ref: str) -> WebhookDeliveryView:
    """Queue the event again now (delivered or abandoned alike) with a fresh 24-hour retry window.
    Refused while an attempt is in flight, so a replay never makes a second concurrent delivery."""
    delivery_id = DELIVERY_ID.parse(ref)
    if delivery_id is None:
        raise DeliveryNotFound("No webhook delivery with this id.")
    done = (
        await session.execute(
            text(
                "UPDATE webhook_outbox SET delivered_at = NULL, abandoned_at = NULL, next_attempt_at = now(), "
                "retry_from = now(), lease_until = NULL "
                "WHERE id = :id AND (lease_until IS NULL OR lease_until <= now()) RETURNING id"
            ),
            {"id": delivery_id},
        )
    ).first()
    if done is None:
        await show_delivery(session, ref)  # 404 when it does not exist
        raise Conflict(
            "A delivery attempt is in flight; replay it after it finishes.", extra={"code": "delivery_in_flight"}
        )
    return await show_delivery(session, ref)
