"""Reading the admin audit log (writing is in ``guards.write_audit``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.models import AdminAuditEntry
from service.admin.schemas import AuditEntryView, AuditPage
from service.admin.tokens import ADMIN_TOKEN_ID
from service.db.base import PrefixedId
from service.db.pagination import keyset, page
from service.errors import InvalidRequest

AUDIT_ID = PrefixedId("au")


def audit_view(row: AdminAuditEntry) -> AuditEntryView:
    return AuditEntryView(
        id=AUDIT_ID.format(row.id),
        at=row.at,
        admin_token_id=None if row.admin_token_id is None else ADMIN_TOKEN_ID.format(row.admin_token_id),
        actor=row.actor,
        role=row.role,
        operation=row.operation,
        method=row.method,
        route=row.route,
        target=row.target,
        status=row.status,
    )


async def list_audit(session: AsyncSession, *, admin_token_id: str | None, cursor: str | None, limit: int) -> AuditPage:
    stmt = select(AdminAuditEntry)
    if admin_token_id is not None:
        token_id = ADMIN_TOKEN_ID.parse(admin_token_id)
        if token_id is None:
            raise InvalidRequest("admin_token_id must be an at_… id.")
        stmt = stmt.where(AdminAuditEntry.admin_token_id == token_id)
    rows = (await session.execute(keyset(stmt, AdminAuditEntry.id, cursor, limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda r: r.id)
    return AuditPage(items=[audit_view(r) for r in items], next_cursor=next_cursor)
