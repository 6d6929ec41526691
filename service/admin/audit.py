"""Reading the admin audit log (every row is written by ``service.db.audit``): a page of it, the
check of its hash chain, and its export as JSON lines.

``verify_chain`` recomputes every row's hash with the expression the insert trigger uses and walks
the chain in ``seq`` order from its tail anchor to its head, in one ``REPEATABLE READ`` snapshot
(a row written or pruned meanwhile cannot look like a broken link). It names the first broken
link and what most likely broke it:

* ``edited`` — a row's content no longer gives its hash, or a row's hash was recomputed so the
  next row no longer links to it;
* ``deleted`` — a row links past a gap in ``seq`` (or the newest rows are missing below the head);
* ``inserted`` — the chain links past a row, or two rows link to the same predecessor, or a row
  sits above the head.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.models import AdminAuditEntry
from service.admin.schemas import AuditBrokenLink, AuditEntryView, AuditPage, AuditVerification
from service.admin.tokens import ADMIN_TOKEN_ID
from service.db.audit import content_sql
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
        seq=row.seq,
        detail=row.detail,
    )


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What a reader narrows the log to (every field optional)."""

    admin_token_id: str | None = None
    actor: str | None = None
    operation: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _filtered(stmt: Any, found: AuditFilter) -> Any:
    if found.admin_token_id is not None:
        token_id = ADMIN_TOKEN_ID.parse(found.admin_token_id)
        if token_id is None:
            raise InvalidRequest("admin_token_id must be an at_… id.")
        stmt = stmt.where(AdminAuditEntry.admin_token_id == token_id)
    if found.actor is not None:
        stmt = stmt.where(AdminAuditEntry.actor == found.actor)
    if found.operation is not None:
        stmt = stmt.where(AdminAuditEntry.operation == found.operation)
    if found.since is not None:
        stmt = stmt.where(AdminAuditEntry.at >= found.since)
    if found.until is not None:
        stmt = stmt.where(AdminAuditEntry.at < found.until)
    return stmt


async def list_audit(
    session: AsyncSession,
    *,
    admin_token_id: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
    narrowed: AuditFilter | None = None,
) -> AuditPage:
    found = narrowed or AuditFilter(admin_token_id=admin_token_id)
    stmt = _filtered(select(AdminAuditEntry), found)
    rows = (await session.execute(keyset(stmt, AdminAuditEntry.id, cursor, limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda r: r.id)
    return AuditPage(items=[audit_view(r) for r in items], next_cursor=next_cursor)


# ---- the chain ----------------------------------------------------------------------------------

_SNAPSHOT = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
_UTC = text("SET LOCAL TimeZone = 'UTC'")
_CHAIN = text("SELECT head_seq, head_hash, tail_seq, tail_hash FROM admin_audit_chain")
_LINKS = text(
    f"SELECT a.seq, a.id, a.prev_hash, a.row_hash, sha256(a.prev_hash || {content_sql('a')}) AS computed "
    "FROM admin_audit_log a ORDER BY a.seq"
)


@dataclass(frozen=True, slots=True)
class _Link:
    seq: int
    id: uuid.UUID
    prev_hash: bytes
    row_hash: bytes
    computed: bytes


def _broken(kind: str, link: _Link, reason: str) -> AuditBrokenLink:
    return AuditBrokenLink(kind=kind, seq=link.seq, id=AUDIT_ID.format(link.id), reason=reason)


class _Walk:
    """The chain walked one row at a time, with the row after it in view (O(1) memory)."""

    def __init__(self, tail_seq: int, tail_hash: bytes, head_seq: int) -> None:
        self.expected_seq, self.expected_prev = tail_seq + 1, tail_hash
        self.head_seq = head_seq
        self.before: _Link | None = None
        self.checked = 0
        self.last: _Link | None = None

    def step(self, link: _Link, after: _Link | None) -> AuditBrokenLink | None:  # noqa: PLR0911 - one verdict per way a link breaks
        skipped = after is not None and after.prev_hash == self.expected_prev
        if link.seq > self.head_seq:
            return _broken("inserted", link, f"seq {link.seq} is above the chain's head (seq {self.head_seq})")
        if link.computed != link.row_hash:
            if skipped:
                return _broken("inserted", link, "the next row links past this row, whose hash is not its own")
            return _broken("edited", link, "this row's content no longer matches its hash")
        if link.prev_hash != self.expected_prev:
            if skipped:
                return _broken("inserted", link, "the next row links past this row")
            if self.before is not None and link.prev_hash == self.before.prev_hash:
                self.checked -= 1  # the row before was counted: it is the one named
                return _broken("inserted", self.before, f"seq {link.seq} links past this row to the one before it")
            if link.seq > self.expected_seq:
                missing = f"seq {self.expected_seq}" + (
                    f" to {link.seq - 1}" if link.seq - 1 > self.expected_seq else ""
                )
                return _broken("deleted", link, f"the row before this one is missing ({missing} deleted)")
            edited = self.before or link
            return _broken("edited", edited, f"seq {link.seq} no longer links to this row's hash: it was rewritten")
        if link.seq != self.expected_seq:
            return _broken("edited", link, f"this row's seq was changed (expected {self.expected_seq})")
        self.checked += 1
        self.expected_seq, self.expected_prev = link.seq + 1, link.row_hash
        self.before = self.last = link
        return None


async def verify_chain(session: AsyncSession) -> AuditVerification:
    """Check the whole chain. ``session`` must not have begun a transaction yet: the check sets
    its own isolation (one snapshot, read-only) as its first statement."""
    await session.execute(_SNAPSHOT)
    await session.execute(_UTC)
    head_seq, head_hash, tail_seq, tail_hash = (await session.execute(_CHAIN)).one()
    walk = _Walk(tail_seq, bytes(tail_hash), head_seq)
    broken: AuditBrokenLink | None = None
    held: _Link | None = None
    async for row in await session.stream(_LINKS):
        link = _Link(row.seq, row.id, bytes(row.prev_hash), bytes(row.row_hash), bytes(row.computed))
        if held is not None and (broken := walk.step(held, link)) is not None:
            break
        held = link
    if broken is None and held is not None:
        broken = walk.step(held, None)
    if broken is None:
        broken = _at_head(walk, head_seq, bytes(head_hash))
    return AuditVerification(
        ok=broken is None,
        checked=walk.checked,
        tail_seq=tail_seq,
        head_seq=head_seq,
        head_hash=bytes(head_hash).hex(),
        broken=broken,
    )


def _at_head(walk: _Walk, head_seq: int, head_hash: bytes) -> AuditBrokenLink | None:
    """Every row linked: the newest must be the head the insert trigger last moved."""
    if walk.expected_seq - 1 == head_seq and walk.expected_prev == head_hash:
        return None
    newest = walk.expected_seq - 1
    if newest < head_seq:
        gone = f"seq {newest + 1}" + (f" to {head_seq}" if head_seq > newest + 1 else "")
        reason = f"the newest rows are missing ({gone} deleted)"
    else:
        reason = "the newest row's hash is not the chain's head: it was rewritten"
    if walk.last is None:
        return AuditBrokenLink(kind="deleted", seq=head_seq, id=None, reason=reason)
    kind = "deleted" if newest < head_seq else "edited"
    return _broken(kind, walk.last, reason)


# ---- export -------------------------------------------------------------------------------------


def export_line(row: AdminAuditEntry) -> str:
    """One row as one JSON line for a SIEM: every column, the hashes in hex."""
    view = audit_view(row)
    document = {
        "id": view.id,
        "seq": row.seq,
        "at": row.at.isoformat(),
        "admin_token_id": view.admin_token_id,
        "actor": row.actor,
        "role": row.role,
        "operation": row.operation,
        "method": row.method,
        "route": row.route,
        "target": row.target,
        "status": row.status,
        "detail": row.detail,
        "prev_hash": bytes(row.prev_hash).hex(),
        "hash": bytes(row.row_hash).hex(),
    }
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


EXPORT_FORMATS = ("jsonl",)


async def export_lines(
    session: AsyncSession, *, since: datetime | None, after_seq: int | None = None, fmt: str = "jsonl"
) -> AsyncIterator[str]:
    """The rows at or after ``since`` (and above ``after_seq``, for an incremental pull), oldest
    link first, each as a line ending in a newline. Streamed: the whole log is never in memory."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidRequest(f"format must be one of: {', '.join(EXPORT_FORMATS)}.")
    stmt = select(AdminAuditEntry)
    if since is not None:
        stmt = stmt.where(AdminAuditEntry.at >= since)
    if after_seq is not None:
        stmt = stmt.where(AdminAuditEntry.seq > after_seq)
    async for row in await session.stream_scalars(stmt.order_by(AdminAuditEntry.seq)):
        yield export_line(row) + "\n"
