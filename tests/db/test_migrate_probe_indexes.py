"""Migration 0019 builds the probe passes' indexes (concurrently, valid), the passes' own claim
statements are index scans on them, and downgrading drops them again."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from service.connections import key_probes, probes
from service.db.migrate import downgrade_async, upgrade_async

BEFORE = "0018"
INDEXES = ["ix_authorizations_probe_due", "ix_connections_key_probe"]


def _positional(sql: str, names: list[str]) -> str:
    """The statement with ``:name`` as ``$n`` (asyncpg's placeholders), ``::`` casts left alone."""
    return re.sub(r"(?<!:):([a-z_]+)", lambda m: f"${names.index(m.group(1)) + 1}", sql)


async def _plan(db: asyncpg.Connection, sql: str, args: dict[str, object]) -> str:
    names = list(args)
    async with db.transaction():
        # A handful of rows would be read sequentially anyway: forbid that, so the plan shows
        # whether the index can serve the statement at all (its predicate and its expression).
        await db.execute("SET LOCAL enable_seqscan = off")
        rows = await db.fetch("EXPLAIN " + _positional(sql, names), *args.values())
    return "\n".join(r[0] for r in rows)


async def _indexes(db: asyncpg.Connection) -> list[tuple[str, bool]]:
    rows = await db.fetch(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = ANY($1) ORDER BY 1",
        INDEXES,
    )
    return [(r[0], r[1]) for r in rows]


async def test_the_probe_claims_are_index_scans_and_the_indexes_go_on_downgrade(
    new_database: Callable[[], Awaitable[str]],
) -> None:
    url = await new_database()
    await upgrade_async(url, BEFORE)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    oauth_claim = {
        "claim": uuid.uuid4(),
        "hold": 20.0,
        "providers": ["files"],
        "margin": 60.0,
        "interval": 3600.0,
        "batch": 100,
    }
    key_claim = {"claim": uuid.uuid4(), "hold": 20.0, "providers": ["keys"], "interval": 3600.0, "batch": 100}

    db = await asyncpg.connect(dsn)
    try:
        assert "ix_authorizations_probe_due" not in await _plan(db, probes._CLAIM_DUE, oauth_claim)
    finally:
        await db.close()

    await upgrade_async(url, "0019")

    db = await asyncpg.connect(dsn)
    try:
        assert await _indexes(db) == [(name, True) for name in INDEXES]
        assert "Index Scan using ix_authorizations_probe_due on authorizations" in await _plan(
            db, probes._CLAIM_DUE, oauth_claim
        )
        assert "Index Scan using ix_connections_key_probe on connections" in await _plan(
            db, key_probes._CLAIM_DUE, key_claim
        )
    finally:
        await db.close()

    await downgrade_async(url, BEFORE)

    db = await asyncpg.connect(dsn)
    try:
        assert await _indexes(db) == []
    finally:
        await db.close()
