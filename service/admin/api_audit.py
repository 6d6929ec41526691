"""The admin API's audit routes: read a page of the log, check its hash chain, export it.

Each is an admin call like any other, so reading the log writes a row of its own (the guard's
middleware, after the handler): who looked, and at what.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from litestar import Request, get
from litestar.params import Parameter
from litestar.response import Stream

from service.admin import audit
from service.admin.deps import ADMIN, AdminDeps, in_unit
from service.admin.schemas import AuditPage, AuditVerification
from service.errors import InvalidRequest

Limit = Annotated[int, Parameter(ge=1, le=500, default=50, description="Page size")]
Cursor = Annotated[str | None, Parameter(description="`next_cursor` from the previous page")]

JSONL = "application/jsonl"


@get(
    "/audit",
    operation_id="adminListAudit",
    tags=["admin: audit"],
    opt=ADMIN,
    summary="The admin audit log, newest first",
)
async def admin_audit(
    request: Request[Any, Any, Any],
    services: AdminDeps,
    admin_token_id: str | None = None,
    actor: Annotated[str | None, Parameter(description="api, cli or console")] = None,
    operation: Annotated[str | None, Parameter(description="an operation id, e.g. adminCancelFlow")] = None,
    since: Annotated[datetime | None, Parameter(description="rows at or after this time")] = None,
    until: Annotated[datetime | None, Parameter(description="rows before this time")] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> AuditPage:
    narrowed = audit.AuditFilter(
        admin_token_id=admin_token_id, actor=actor, operation=operation, since=since, until=until
    )
    return await in_unit(services, audit.list_audit, cursor=cursor, limit=limit, narrowed=narrowed)


@get(
    "/audit/verify",
    operation_id="adminVerifyAudit",
    tags=["admin: audit"],
    opt=ADMIN,
    summary="Check the audit log's hash chain and name its first broken link",
    description="Answers 200 either way: `ok` false with `broken` naming the row (edited, deleted or inserted).",
)
async def admin_verify_audit(request: Request[Any, Any, Any], services: AdminDeps) -> AuditVerification:
    async with services.sessions() as session:
        return await audit.verify_chain(session)


@get(
    "/audit/export",
    operation_id="adminExportAudit",
    tags=["admin: audit"],
    opt=ADMIN,
    summary="The audit log as JSON lines, oldest link first (for a SIEM)",
    media_type=JSONL,
)
async def admin_export_audit(
    request: Request[Any, Any, Any],
    services: AdminDeps,
    since: Annotated[datetime | None, Parameter(description="rows at or after this time")] = None,
    after_seq: Annotated[
        int | None, Parameter(ge=0, description="only rows above this seq (the last one a previous export gave)")
    ] = None,
    format: Annotated[str, Parameter(default="jsonl", description="jsonl")] = "jsonl",
) -> Stream:
    if format not in audit.EXPORT_FORMATS:
        raise InvalidRequest(f"format must be one of: {', '.join(audit.EXPORT_FORMATS)}.")

    async def lines() -> AsyncIterator[str]:
        async with services.sessions() as session:
            async for line in audit.export_lines(session, since=since, after_seq=after_seq, fmt=format):
                yield line

    return Stream(lines(), media_type=JSONL)


AUDIT_HANDLERS = [admin_verify_audit, admin_export_audit, admin_audit]
