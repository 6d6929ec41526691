"""``elicitd keys rotate``: re-encrypt every vault value not under the current key.

Rotation runs while the service runs. Each batch is one short transaction that locks its rows
with ``FOR UPDATE SKIP LOCKED`` (so it never waits on, or blocks, a request touching other rows)
and writes each row back with a conditional ``UPDATE … WHERE key_id = <old> AND blob = <old>``:
a value the service replaced meanwhile is left alone, never overwritten with a stale one. Rows
skipped because a request held them (a token refresh holds its connection's row during the provider
call) are then waited for one at a time, up to ``LOCK_WAIT``: a rotation run during normal traffic
still finishes every row instead of leaving some under the old key.

The columns are the ones declared in :mod:`service.crypto.columns`. Rows whose value cannot be
decrypted (tampered, moved to another owner, or sealed by a key no longer in the ring) are reported
and left as they are.

**Grants.** Grant rows hold no secret but carry a MAC (``service.grants.integrity``); rotation
re-MACs those under an older key (after checking the old MAC) and MACs the grants that existed
before migration 0012 (marked ``legacy`` by it). A grant whose MAC does not check is reported as
failed and left unsealed.

**Rebinding.** A column whose declaration binds the owner's fields (``bound_sql``: a connection's
issuer, subject, provider and account) may still hold values sealed before those fields were bound.
A migration cannot rewrite them (it has no keys), so rotation does: every value it rewrites is read
with the new associated data or, failing that, the old one (owner and purpose alone), and sealed
with the new. Values already under the current key are not selected by the pass above, so a second
pass walks those columns' rows under the current key in id order and rewrites each one that opens
only the old way. Running ``elicitd keys rotate`` once after upgrading — with the same key ring —
is therefore enough to bind every stored secret; later runs find nothing to rebind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.crypto.aead import SealError
from service.crypto.columns import ENCRYPTED_COLUMNS, EncryptedColumn
from service.crypto.vault import Vault
from service.db.errors import DbError, classify
from service.db.unit import unit_of_work
from service.grants import integrity

DEFAULT_BATCH = 200
# Longest wait for a row a request holds. Requests hold rows for milliseconds (no provider call
# runs under a row lock), so the session's own lock_timeout would do; a longer wait stays below a
# raised statement_timeout, as the rule in service/db/engine.py ("Timeouts") asks.
LOCK_WAIT = "30s"
LOCK_WAIT_STATEMENT = "35s"


@dataclass(slots=True)
class RotationReport:
    rotated: dict[str, int] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    remaining: dict[str, int] = field(default_factory=dict)
    # Values under the current key rewritten to bind their owner's fields (see "Rebinding").
    rebound: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.failed.values()) and not any(self.remaining.values())


class _StillHeld(Exception):
    """A row a request holds was still held after ``LOCK_WAIT``; it is reported as remaining."""


async def rotate(
    sessions: async_sessionmaker[AsyncSession],
    vault: Vault,
    *,
    columns: Sequence[EncryptedColumn] = ENCRYPTED_COLUMNS,
    batch: int = DEFAULT_BATCH,
) -> RotationReport:
    report = RotationReport()
    for column in columns:
        await _rotate_column(sessions, vault, column, batch, report)
        if column.bound_sql:
            await _rebind_column(sessions, vault, column, batch, report)
    await _seal_grants(sessions, vault, batch, report)
    return report


GRANTS_LABEL = "grants.mac"
# What migration 0012 wrote into ``grants.mac_key_id`` of the grants that existed before it: the
# only rows without a MAC that rotation seals. A row without a MAC and without this mark was not
# written by the service, and is left unsealed (and so never honoured).
LEGACY_MAC = "legacy"


async def _seal_grants(
    sessions: async_sessionmaker[AsyncSession], vault: Vault, batch: int, report: RotationReport
) -> None:
    """MAC the grants that have none yet (made before migration 0012) and re-MAC those under an
    older key, each only after its current MAC checked: a tampered row is reported, never sealed."""
    select_sql = text(
        "SELECT id, connection_id, authorization_id, server_client_id, trust_group_id, scopes, mac, mac_key_id "
        "FROM grants WHERE mac_key_id IS DISTINCT FROM :current AND NOT (id = ANY(:skip)) "
        "ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED"
    )
    update_sql = text(
        "UPDATE grants SET mac = :mac, mac_key_id = :kid WHERE id = :id AND mac IS NOT DISTINCT FROM :old_mac "
        "AND mac_key_id IS NOT DISTINCT FROM :old_kid AND scopes = CAST(:scopes AS text[])"
    )
    failed: list[Any] = []
    sealed = 0
    while True:
        async with unit_of_work(sessions) as session:
            rows = (
                await session.execute(select_sql, {"current": vault.current_key_id, "skip": failed, "batch": batch})
            ).all()
            if not rows:
                break
            for row in rows:
                what = {
                    "connection_id": row.connection_id,
                    "authorization_id": row.authorization_id,
                    "server_client_id": row.server_client_id,
                    "trust_group_id": row.trust_group_id,
                    "scopes": list(row.scopes or ()),
                }
                legacy = row.mac is None and row.mac_key_id == LEGACY_MAC
                if not legacy and not vault.verify_mac(
                    row.mac_key_id, row.mac, integrity.fields(**what), purpose=integrity.PURPOSE
                ):
                    failed.append(row.id)
                    continue
                kid, mac = integrity.seal(vault, **what)
                result = await session.execute(
                    update_sql,
                    {
                        "id": row.id,
                        "mac": mac,
                        "kid": kid,
                        "old_mac": row.mac,
                        "old_kid": row.mac_key_id,
                        "scopes": what["scopes"],
                    },
                )
                sealed += int(result.rowcount or 0)  # type: ignore[attr-defined]
    report.rotated[GRANTS_LABEL] = sealed
    report.failed[GRANTS_LABEL] = [_show(i) for i in failed]
    report.remaining[GRANTS_LABEL] = 0


def _bound_select(column: EncryptedColumn) -> str:
    """The bound columns as ``bound_0, bound_1, …`` (identifiers from the declaration, never input)."""
    return "".join(f", {name} AS bound_{i}" for i, name in enumerate(column.bound_sql))


def _bound(column: EncryptedColumn, row: Any) -> tuple[str, ...]:
    return tuple(str(getattr(row, f"bound_{i}")) for i in range(len(column.bound_sql)))


async def _rotate_column(
    sessions: async_sessionmaker[AsyncSession],
    vault: Vault,
    column: EncryptedColumn,
    batch: int,
    report: RotationReport,
) -> None:
    c = column
    # Identifiers come from the declaration (code), never from input; values are bound parameters.
    select_template = f"""
        SELECT {c.id_column} AS id, {c.key_id_column} AS key_id, {c.blob_column} AS blob,
               {c.owner_sql} AS owner{_bound_select(c)}
        FROM {c.table}
        WHERE {c.key_id_column} IS NOT NULL AND {c.key_id_column} <> :current
          AND NOT ({c.id_column} = ANY(:skip))
        ORDER BY {c.id_column}
        LIMIT :batch
        FOR UPDATE /*locking*/
    """
    # First skip rows a request holds (never block, never be blocked); then wait for those, one
    # row per transaction so the waiting transaction holds no other lock (no deadlock possible).
    skip_locked = text(select_template.replace("/*locking*/", "SKIP LOCKED"))
    wait_locked = text(select_template.replace("/*locking*/", ""))
    update_sql = text(f"""
        UPDATE {c.table} SET {c.key_id_column} = :new_key_id, {c.blob_column} = :new_blob
        WHERE {c.id_column} = :id AND {c.key_id_column} = :old_key_id AND {c.blob_column} = :old_blob
    """)
    failed: list[Any] = []
    rotated = 0
    waiting = False
    while True:
        try:
            async with unit_of_work(sessions) as session:
                params = {
                    "current": vault.current_key_id,
                    "skip": failed,
                    "batch": 1 if waiting else batch,
                }
                if waiting:
                    await session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'"))
                    await session.execute(text(f"SET LOCAL statement_timeout = '{LOCK_WAIT_STATEMENT}'"))
                try:
                    rows = (await session.execute(wait_locked if waiting else skip_locked, params)).all()
                except DBAPIError as exc:
                    if classify(exc) is not DbError.LOCK_NOT_AVAILABLE:
                        raise
                    # The transaction is aborted: leave the unit without committing it.
                    raise _StillHeld from None
                if not rows:
                    if waiting:
                        break
                    waiting = True
                    continue
                waiting = False
                for row in rows:
                    bound = _bound(c, row)
                    try:
                        plaintext = vault.decrypt(
                            row.key_id, row.blob, owner=row.owner, purpose=c.purpose, bound=bound, unbound_ok=True
                        )
                    except SealError:
                        failed.append(row.id)
                        continue
                    new_key_id, new_blob = vault.encrypt(plaintext, owner=row.owner, purpose=c.purpose, bound=bound)
                    result = await session.execute(
                        update_sql,
                        {
                            "id": row.id,
                            "new_key_id": new_key_id,
                            "new_blob": new_blob,
                            "old_key_id": row.key_id,
                            "old_blob": row.blob,
                        },
                    )
                    rotated += int(result.rowcount or 0)  # type: ignore[attr-defined]
        except _StillHeld:
            break  # still held after LOCK_WAIT: reported as remaining
    async with sessions() as session:
        remaining = (
            await session.execute(
                text(
                    f"SELECT count(*) FROM {c.table} WHERE {c.key_id_column} IS NOT NULL "
                    f"AND {c.key_id_column} <> :current"
                ),
                {"current": vault.current_key_id},
            )
        ).scalar_one()
    report.rotated[c.label] = rotated
    report.failed[c.label] = [_show(i) for i in failed]
    report.remaining[c.label] = int(remaining) - len(failed)


async def _rebind_column(
    sessions: async_sessionmaker[AsyncSession],
    vault: Vault,
    column: EncryptedColumn,
    batch: int,
    report: RotationReport,
) -> None:
    """Rewrite the values under the current key that open only without their bound fields.

    Keyset order over the id: each batch is one short transaction that locks its rows (requests
    hold a connection's row for milliseconds, so the session's lock_timeout is wait enough), and
    each rewrite is conditional on the value still being the one read.
    """
    c = column
    select_template = f"""
        SELECT {c.id_column} AS id, {c.key_id_column} AS key_id, {c.blob_column} AS blob,
               {c.owner_sql} AS owner{_bound_select(c)}
        FROM {c.table}
        WHERE {c.key_id_column} = :current AND {c.blob_column} IS NOT NULL /*after*/
        ORDER BY {c.id_column}
        LIMIT :batch
        FOR UPDATE
    """
    first_sql = text(select_template.replace("/*after*/", ""))
    next_sql = text(select_template.replace("/*after*/", f"AND {c.id_column} > :after"))
    update_sql = text(f"""
        UPDATE {c.table} SET {c.blob_column} = :new_blob
        WHERE {c.id_column} = :id AND {c.key_id_column} = :key_id AND {c.blob_column} = :old_blob
    """)
    after: Any = None
    rebound = 0
    failed = report.failed.setdefault(c.label, [])
    while True:
        async with unit_of_work(sessions) as session:
            params: dict[str, Any] = {"current": vault.current_key_id, "batch": batch}
            if after is not None:
                params["after"] = after
            rows = (await session.execute(first_sql if after is None else next_sql, params)).all()
            if not rows:
                break
            for row in rows:
                bound = _bound(c, row)
                if vault.is_bound(row.key_id, row.blob, owner=row.owner, purpose=c.purpose, bound=bound):
                    continue
                try:
                    plaintext = vault.decrypt(
                        row.key_id, row.blob, owner=row.owner, purpose=c.purpose, bound=bound, unbound_ok=True
                    )
                except SealError:
                    failed.append(_show(row.id))
                    continue
                key_id, new_blob = vault.encrypt(plaintext, owner=row.owner, purpose=c.purpose, bound=bound)
                assert key_id == row.key_id  # both the current key
                result = await session.execute(
                    update_sql, {"id": row.id, "key_id": row.key_id, "new_blob": new_blob, "old_blob": row.blob}
                )
                rebound += int(result.rowcount or 0)  # type: ignore[attr-defined]
            after = rows[-1].id
    report.rebound[c.label] = rebound


def _show(value: Any) -> str:
    return value.hex() if isinstance(value, bytes) else str(value)


# ---- CLI -----------------------------------------------------------------------------------------
def cmd_keys_rotate(args: Any) -> None:
    """Print what was re-encrypted; exit non-zero when some value could not be (operator must look)."""
    import asyncio
    import json

    from service.db.engine import make_engine, make_sessionmaker
    from service.settings import Settings

    settings = Settings.from_env()

    async def run() -> RotationReport:
        engine = make_engine(settings)
        try:
            return await rotate(make_sessionmaker(engine), Vault(settings.keys), batch=args.batch)
        finally:
            await engine.dispose()

    report = asyncio.run(run())
    if args.json:
        print(
            json.dumps(
                {
                    "current_key_id": settings.keys.current[0],
                    "rotated": report.rotated,
                    "failed": report.failed,
                    "remaining": report.remaining,
                    "rebound": report.rebound,
                },
                indent=2,
            )
        )
    else:
        print(f"current key: {settings.keys.current[0]}")
        for label, count in report.rotated.items():
            failed = report.failed.get(label, [])
            rebound = f", rebound {report.rebound[label]}" if label in report.rebound else ""
            print(
                f"{label}: re-encrypted {count}{rebound}, failed {len(failed)}, "
                f"still old {report.remaining.get(label, 0)}"
            )
            for ident in failed:
                print(f"  cannot decrypt row {ident} (tampered, moved, or its key is gone)")
    if not report.ok:
        raise SystemExit(1)
