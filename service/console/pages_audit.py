"""The console's Audit pages (``/console/audit``): the admin audit log filtered and paged, its
export as JSON lines, and the check of its hash chain naming the first broken link.

Each reads through the admin API's own functions (``service.admin.audit``: ``list_audit``,
``export_lines``, ``verify_chain``) and, as in the API, needs the admin role. Reading the log is
an admin call like any other: each page names the API operation it mirrors (``opt["audit"]``), so
looking at the log, exporting it or checking it writes its own row (actor ``console``).

The window is resolved once, on the database clock, when a search starts; the next page's link and
the export link carry that instant (``since``), so neither shifts under the reader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.params import Parameter
from litestar.response import Stream

from service.admin import audit
from service.admin.deps import ADMIN
from service.admin.flows import db_now
from service.admin.tokens import Role
from service.console.deps import ConsoleDeps
from service.console.flow_words import WINDOWS
from service.console.render import CONSOLE_HEADERS, render
from service.errors import ElicitdError
from service.i18n import N_, _

NAV = (70, "/console/audit", N_("Audit"))
PAGE = 50

DEFAULT_WINDOW = "24h"
ACTORS = {"api": N_("Admin API"), "cli": N_("Command line"), "console": N_("Console")}

# What each kind of broken link means, for a person; verify's own reason is shown beside it.
BROKEN = {
    "edited": N_("Row %(seq)s was changed after it was written."),
    "deleted": N_("A row before row %(seq)s was deleted."),
    "inserted": N_("Row %(seq)s was slipped into the chain after it was written."),
}


def _who(entry: Any) -> tuple[str, str]:
    """(kind, text) of who made the call: an admin token's id, a console operator, the CLI."""
    if entry.admin_token_id:
        return "token", entry.admin_token_id
    operator = entry.detail.get("operator") if isinstance(entry.detail, dict) else None
    if isinstance(operator, dict) and operator.get("sub"):
        return "operator", f"{operator.get('sub')} @ {operator.get('iss', '')}"
    return "cli", ""


def _role(label: str | None) -> Role | None:
    return next((role for role in Role if role.label == label), None)


@get("/audit", name="console-audit", opt={**ADMIN, "audit": "adminListAudit"})
async def audit_page(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    actor: str | None = None,
    operation: str | None = None,
    window: str | None = None,
    since: datetime | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Parameter(ge=1, le=PAGE)] = PAGE,
) -> Response[Any]:
    asked = {
        "actor": actor if actor in ACTORS else "",
        "operation": (operation or "").strip(),
        "window": window if window in WINDOWS else DEFAULT_WINDOW,
    }
    error = None
    items: list[Any] = []
    next_cursor = None
    try:
        async with services.sessions() as session:  # a read: nothing to commit
            span = WINDOWS[asked["window"]][0]
            if since is None and span is not None:
                since = await db_now(session) - span
            narrowed = audit.AuditFilter(
                actor=asked["actor"] or None, operation=asked["operation"] or None, since=since
            )
            found = await audit.list_audit(session, cursor=cursor, limit=limit, narrowed=narrowed)
            items, next_cursor = found.items, found.next_cursor
    except ElicitdError as exc:
        error = {"lead": _("The search was not understood."), "detail": exc.detail, "code": exc.problem_code}
    carried = {k: v for k, v in asked.items() if v and (k != "window" or since is None)}
    if since is not None:
        carried["since"] = since.isoformat()
    export = {"since": since.isoformat()} if since is not None else {}
    return render(
        request,
        "console/audit.html",
        status=400 if error else 200,
        area="audit",
        asked=asked,
        items=[(entry, *_who(entry), _role(entry.role)) for entry in items],
        next_cursor=next_cursor,
        carried=carried,
        export=export,
        since=since,
        error=error,
        actors=list(ACTORS.items()),
        windows=[(value, label) for value, (_span, label) in WINDOWS.items()],
    )


@get("/audit/verify", name="console-audit-verify", opt={**ADMIN, "audit": "adminVerifyAudit"})
async def verify_page(request: Request[Any, Any, Any], services: ConsoleDeps) -> Response[Any]:
    async with services.sessions() as session:
        found = await audit.verify_chain(session)
    broken = found.broken
    meaning = None if broken is None else _(BROKEN[broken.kind]) % {"seq": broken.seq}
    return render(request, "console/audit_verify.html", area="audit", found=found, meaning=meaning)


@get("/audit/export", name="console-audit-export", opt={**ADMIN, "audit": "adminExportAudit"})
async def export(request: Request[Any, Any, Any], services: ConsoleDeps, since: datetime | None = None) -> Stream:
    """The rows as JSON lines, oldest link first. Served as text (shown in the tab, or saved by the
    page's download link), so no browser has to guess what to do with ``application/jsonl``."""

    async def lines() -> AsyncIterator[str]:
        async with services.sessions() as session:
            async for line in audit.export_lines(session, since=since):
                yield line

    return Stream(
        lines(),
        media_type="text/plain; charset=utf-8",
        headers={**CONSOLE_HEADERS, "Content-Disposition": 'inline; filename="elicitd-audit.jsonl"'},
    )


ROUTES = [audit_page, verify_page, export]
