"""The one writer of ``admin_audit_log`` rows, for the admin API and for every command.

The admin API (``service.admin.guards``), ``elicitd admin …``, ``elicitd groups/grants …`` and the
other commands ``elicitd`` audits all append through this module, so a row means the same wherever
it was written: a command's row has actor ``cli``, the status the admin API would have answered
(200, or the refusal's status) and ``{"result": "ok"}`` or ``{"result": "error", "code": …}``. It
sits below every domain that writes a row; reading the log is the admin API's
(``service.admin.audit``).

Rows are append-only links of one hash chain (migration 0020). The chain is the database's own
work: a ``BEFORE INSERT`` trigger locks the chain's head row, links the new row to it and moves the
head, inside the one ``INSERT`` below — so every writer, the previous release's included, is
chained the same way, and two concurrent writers queue on the head instead of forking it. A row is
never updated (a trigger refuses it): an outcome known only after the row was written is a row of
its own (``correction_row``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.db.base import uuid7
from service.db.unit import unit_of_work
from service.errors import ElicitdError

T = TypeVar("T")

INSERT = text(
    "INSERT INTO admin_audit_log (id, admin_token_id, actor, role, operation, method, route, target, "
    "status, detail) VALUES (:id, :token, :actor, :role, :op, :method, :route, :target, :status, "
    "CAST(:detail AS jsonb))"
)

# The same row, written only if its transaction has changed something (PostgreSQL assigns a
# transaction id at its first write): the admin API's row rides in the first commit of its
# action, and a commit that changed nothing (a conditional statement that matched no row, then a
# refusal) leaves the row to be written after the handler, with the status the call answered.
INSERT_IF_CHANGED = text(
    "INSERT INTO admin_audit_log (id, admin_token_id, actor, role, operation, method, route, target, "
    "status, detail) SELECT CAST(:id AS uuid), CAST(:token AS uuid), CAST(:actor AS text), "
    "CAST(:role AS text), CAST(:op AS text), CAST(:method AS text), CAST(:route AS text), "
    "CAST(:target AS text), CAST(:status AS integer), CAST(:detail AS jsonb) "
    "WHERE pg_current_xact_id_if_assigned() IS NOT NULL"
)


def content_sql(row: str) -> str:
    """SQL for the bytes a row's ``row_hash`` covers (after its ``prev_hash``): the row as JSON with
    its chain columns and its NULL columns left out, in jsonb's key order, as UTF-8. ``row`` names a
    row of ``admin_audit_log`` (a table alias; an identifier from code, never input).

    Timestamps render in the session's time zone: run it with ``TimeZone`` set to UTC, as the
    trigger's function does. The migration holds a frozen copy of this expression; the chain tests
    fail if the two differ. Leaving NULL columns out keeps old rows' hashes when a later release
    adds a nullable column, and that column is covered from its first value on."""
    return (
        "convert_to(coalesce((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(to_jsonb("
        f"{row})) e WHERE e.key NOT IN ('seq', 'prev_hash', 'row_hash') AND e.value <> 'null'::jsonb),"
        " '{}'::jsonb)::text, 'UTF8')"
    )


def audit_row(
    *,
    actor: str,
    operation: str,
    token_id: uuid.UUID | None = None,
    role: str | None = None,
    method: str | None = None,
    route: str | None = None,
    target: str | None = None,
    status: int | None = None,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The values of one row for ``INSERT`` (its ``id`` included, so a caller can find it again)."""
    return {
        "id": uuid7(),
        "token": token_id,
        "actor": actor,
        "role": role,
        "op": operation,
        "method": method,
        "route": route,
        "target": target,
        "status": status,
        "detail": json.dumps(detail or {}),
    }


def correction_row(answered: dict[str, Any], written_id: str) -> dict[str, Any]:
    """The row saying a call answered otherwise than the row its change committed with: the call's
    row as made for the status it answered (``answered``, a new id), with ``detail.corrects``
    naming the row it amends (``written_id``, its public id). The first row stays as it was."""
    return {**answered, "detail": json.dumps({**json.loads(answered["detail"]), "corrects": written_id})}


async def write_audit(session: AsyncSession, **fields: Any) -> None:
    """Append one row in ``session``'s transaction (``fields`` as for ``audit_row``)."""
    await session.execute(INSERT, audit_row(**fields))


def outcome(refused: BaseException | None) -> tuple[int, dict[str, Any]]:
    """A command's status and detail: what the admin API would have answered for the same call.

    An error that is not a refusal (a bug, a lost database) is a 500, so ``admin audit`` never
    reads a failed command as an empty, success-looking row."""
    if refused is None:
        return 200, {"result": "ok"}
    if isinstance(refused, ElicitdError):
        return refused.status, {"result": "error", "code": refused.problem_code}
    return 500, {"result": "error"}


async def audited(
    sessions: async_sessionmaker[AsyncSession],
    operation: str,
    run: Callable[[], Awaitable[T]],
    *,
    target: Callable[[], str | None],
) -> T:
    """Run a command's work, then write its row (actor ``cli``), whether it succeeded or not.

    The row is written in a transaction of its own after the work's: a refused command changed
    nothing, and its row still says it was refused. ``target`` is read after the work, which may
    only then know the id of what it acted on."""
    refused: BaseException | None = None
    try:
        return await run()
    except BaseException as error:
        refused = error
        raise
    finally:
        status, detail = outcome(refused)
        async with unit_of_work(sessions) as session:
            await write_audit(session, actor="cli", operation=operation, target=target(), status=status, detail=detail)
