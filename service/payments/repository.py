"""SQL for payments. Repositories never commit; every change is one conditional statement."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.payments.models import Payment


async def ensure_payment(session: AsyncSession, values: dict[str, Any]) -> Payment:
    """The flow's payment row, created on first checkout (``ON CONFLICT`` makes racing clicks share it)."""
    await session.execute(
        text(
            "INSERT INTO payments (flow_id, provider, amount, currency, description, idempotency_key) "
            "VALUES (:flow_id, :provider, :amount, :currency, :description, :idempotency_key) "
            "ON CONFLICT (flow_id) DO NOTHING"
        ),
        values,
    )
    found = await get(session, values["flow_id"])
    assert found is not None
    return found


async def get(session: AsyncSession, flow_id: uuid.UUID) -> Payment | None:
    stmt = select(Payment).where(Payment.flow_id == flow_id).execution_options(populate_existing=True)
    return (await session.execute(stmt)).scalars().first()


async def by_session(session: AsyncSession, provider: str, session_id: str) -> Payment | None:
    stmt = (
        select(Payment)
        .where(Payment.provider == provider, Payment.session_id == session_id)
        .execution_options(populate_existing=True)
    )
    return (await session.execute(stmt)).scalars().first()


async def attach_session(
    session: AsyncSession, flow_id: uuid.UUID, *, session_id: str, url: str | None, expires_at: datetime | None
) -> None:
    """Record the provider's session once; a racing attach of the same (idempotent) session is a no-op."""
    await session.execute(
        text(
            "UPDATE payments SET session_id = :sid, checkout_url = :url, session_expires_at = :exp, "
            "status = 'open', updated_at = now() WHERE flow_id = :f AND session_id IS NULL AND status = 'created'"
        ),
        {"f": flow_id, "sid": session_id, "url": url, "exp": expires_at},
    )


async def extend_flow(session: AsyncSession, flow_id: uuid.UUID, until: datetime) -> None:
    """Keep a pending flow alive while its checkout can still be paid.

    Without this a user could pay on the provider's page after the flow expired here (Stripe
    sessions live at least 30 minutes; a flow may live 5). Only a live pending flow is extended:
    an expired one stays expired.
    """
    await session.execute(
        text(
            "UPDATE flows SET expires_at = GREATEST(expires_at, :until), updated_at = now() "
            "WHERE id = :f AND status = 'pending' AND expires_at > now()"
        ),
        {"f": flow_id, "until": until},
    )


async def record_event(
    session: AsyncSession,
    *,
    event_id: str,
    provider: str,
    event_type: str,
    flow_id: uuid.UUID | None,
    session_id: str | None,
) -> bool:
    """Claim an event id. False when it was already processed (or is being processed right now:
    the primary key makes a concurrent duplicate wait for the first, then find it)."""
    row = await session.execute(
        text(
            "INSERT INTO payment_events (event_id, provider, type, flow_id, session_id, outcome) "
            "VALUES (:e, :p, :t, :f, :s, 'received') ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
        ),
        {"e": event_id, "p": provider, "t": event_type, "f": flow_id, "s": session_id},
    )
    return row.first() is not None


async def set_event_outcome(session: AsyncSession, event_id: str, outcome: str) -> None:
    await session.execute(
        text("UPDATE payment_events SET outcome = :o WHERE event_id = :e"), {"e": event_id, "o": outcome}
    )


async def settle(
    session: AsyncSession, flow_id: uuid.UUID, *, status: str, payment_id: str | None, settled_by: str
) -> bool:
    """Move an unsettled payment to its final status; False when it was already settled."""
    row = await session.execute(
        text(
            "UPDATE payments SET status = :st, payment_id = COALESCE(:pid, payment_id), settled_by = :by, "
            "updated_at = now() WHERE flow_id = :f AND status IN ('created', 'open', 'processing') "
            "RETURNING flow_id"
        ),
        {"f": flow_id, "st": status, "pid": payment_id, "by": settled_by},
    )
    return row.first() is not None


async def mark_processing(session: AsyncSession, flow_id: uuid.UUID) -> None:
    await session.execute(
        text(
            "UPDATE payments SET status = 'processing', updated_at = now() "
            "WHERE flow_id = :f AND status IN ('created', 'open')"
        ),
        {"f": flow_id},
    )


async def unsettled(session: AsyncSession, *, older_than_seconds: float, limit: int) -> list[tuple[uuid.UUID, str]]:
    """Checkouts still open here (the webhook never came), or whose flow ended while open."""
    rows = await session.execute(
        text(
            "SELECT p.flow_id, p.session_id FROM payments p JOIN flows f ON f.id = p.flow_id "
            "WHERE p.status IN ('open', 'processing') AND p.session_id IS NOT NULL "
            "AND p.updated_at <= now() - make_interval(secs => :age) ORDER BY p.updated_at LIMIT :lim"
        ),
        {"age": older_than_seconds, "lim": limit},
    )
    return [(r[0], r[1]) for r in rows]
