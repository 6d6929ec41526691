"""Alembic environment: runs only through ``service.db.migrate``.

That module opens the connection, takes the migration lock and sets the timeouts, then hands the
connection over here; running Alembic any other way would skip all three, so it is refused.
Each migration runs in its own transaction, so a failed one rolls back whole and a retry starts
from the last one that committed.

Operations in the migrations build their constraints with the models' naming convention (that is
what ``target_metadata`` brings besides autogenerate), so an explicit name in a migration is
wrapped in ``op.f()``: the ``ck`` convention would otherwise prefix it a second time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo

from service.db.migrate import COMPARE_OPTIONS, target_metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("run migrations with `elicitd migrate` (service.db.migrate), which holds the migration lock")
ran: list[str] = config.attributes["ran"]


def _record(ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]) -> None:
    """What ``upgrade_async`` returns: the revisions this run applied (or undid), in order."""
    ran.append(step.up_revision_id or "")


context.configure(
    connection=connection,
    target_metadata=target_metadata(),
    transaction_per_migration=True,
    on_version_apply=_record,
    **COMPARE_OPTIONS,
)
with context.begin_transaction():
    context.run_migrations()
