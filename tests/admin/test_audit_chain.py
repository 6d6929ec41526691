"""The audit log's hash chain on real PostgreSQL: concurrent writers make one unbroken chain;
editing, deleting or inserting one row directly in the database is found by ``verify`` naming that
row; retention prunes only the chain's oldest end; the export is exact; reading the log (API and
CLI) writes a row of its own.

The chain tests run on a database of their own: they tamper with it, and the shared session
database's chain must stay intact for everyone else."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from service.admin.audit import AUDIT_ID, export_lines, verify_chain
from service.admin.tokens import Role, create_token, parse_lifetime
from service.db.audit import content_sql, write_audit
from service.db.unit import unit_of_work
from service.flows.retention import run_step, steps
from tests.admin.conftest import Token, admin_http
from tests.admin.test_secrets_and_cli import _cli, _cli_env
from tests.support import backends
from tests.support.apps import RunningApp

if TYPE_CHECKING:
    from service.settings import Settings

GENESIS = "00" * 32


@pytest.fixture(scope="module")
async def chain_url(backend: backends.Backends) -> AsyncIterator[str]:
    async with backends.migrated_database(backend.server_url) as url:
        yield url


@pytest.fixture(scope="module")
async def sessions(chain_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_async_engine(chain_url, pool_size=10, max_overflow=0)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


async def verdict(sessions: async_sessionmaker[AsyncSession]) -> dict[str, Any]:
    async with sessions() as session:
        found = await verify_chain(session)
    broken = found.broken
    return {
        "ok": found.ok,
        "checked": found.checked,
        "head": found.head_seq,
        "broken": None if broken is None else (broken.kind, broken.seq, broken.id),
    }


async def sql(sessions: async_sessionmaker[AsyncSession], *statements: str, **params: Any) -> list[Any]:
    """Statements in one transaction that goes around the table's triggers (as a table owner or a
    superuser can), committed: what someone editing the database directly would do."""
    async with sessions() as session:
        await session.execute(text("SET LOCAL session_replication_role = replica"))
        rows: list[Any] = []
        for statement in statements:
            result = await session.execute(text(statement), params)
            rows = list(result.all()) if result.returns_rows else rows  # type: ignore[attr-defined]
        await session.commit()
    return rows


async def row_at(sessions: async_sessionmaker[AsyncSession], seq: int) -> Any:
    async with sessions() as session:
        return (await session.execute(text("SELECT * FROM admin_audit_log WHERE seq = :s"), {"s": seq})).one()


async def test_chain(sessions: async_sessionmaker[AsyncSession]) -> None:
    """One long story on one database, each step's verdict exact."""
    assert await verdict(sessions) == {"ok": True, "checked": 0, "head": 0, "broken": None}

    # 100 changes from 10 connections at once: each an admin token made and its audit row, in one
    # transaction (the row last, as the admin API's rides in the commit). Every tenth writer also
    # names the chain columns itself, with junk: the trigger overwrites them.
    start = asyncio.Event()

    async def writer(n: int) -> None:
        await start.wait()
        for i in range(10):
            async with unit_of_work(sessions) as session:
                made = await create_token(session, name=f"w{n}-{i}", role=Role.VIEWER, lifetime=parse_lifetime("1h"))
                if i == 9:
                    await session.execute(
                        text(
                            "INSERT INTO admin_audit_log (id, actor, operation, target, seq, prev_hash, row_hash) "
                            "VALUES (gen_random_uuid(), 'cli', 'old', :t, 1, '\\x00', '\\x00')"
                        ),
                        {"t": f"token={made.token.id}"},
                    )
                else:
                    await write_audit(session, actor="cli", operation="cliCreateAdminToken", target=str(made.token.id))
                await session.execute(text("SELECT pg_sleep(0.002)"))  # widen the window between link and commit

    tasks = [asyncio.create_task(writer(n)) for n in range(10)]
    start.set()
    await asyncio.gather(*tasks)
    async with sessions() as session:
        seqs = list((await session.execute(text("SELECT seq FROM admin_audit_log ORDER BY seq"))).scalars())
        tokens = (await session.execute(text("SELECT count(*) FROM admin_tokens"))).scalar_one()
    assert (seqs, tokens) == (list(range(1, 101)), 100)
    assert await verdict(sessions) == {"ok": True, "checked": 100, "head": 100, "broken": None}

    # Through the triggers, a row cannot be edited at all.
    with pytest.raises(DBAPIError, match="append-only"):
        async with unit_of_work(sessions) as session:
            await session.execute(text("UPDATE admin_audit_log SET status = 500 WHERE seq = 37"))

    # Edited around the triggers: the row is named.
    row37 = await row_at(sessions, 37)
    await sql(sessions, "UPDATE admin_audit_log SET status = 500 WHERE seq = 37")
    assert await verdict(sessions) == {
        "ok": False,
        "checked": 36,
        "head": 100,
        "broken": ("edited", 37, AUDIT_ID.format(row37.id)),
    }
    await sql(sessions, "UPDATE admin_audit_log SET status = NULL WHERE seq = 37")
    assert (await verdict(sessions))["ok"] is True

    # Edited, its hash recomputed to match: the next row no longer links to it.
    await sql(sessions, "UPDATE admin_audit_log SET target = 'forged' WHERE seq = 37", *rehash("seq = 37"))
    assert (await verdict(sessions))["broken"] == ("edited", 37, AUDIT_ID.format(row37.id))
    await restore(sessions, row37)

    # Deleted: the row after the gap is named, and the gap.
    await sql(sessions, "DELETE FROM admin_audit_log WHERE seq = 37")
    row38 = await row_at(sessions, 38)
    assert await verdict(sessions) == {
        "ok": False,
        "checked": 36,
        "head": 100,
        "broken": ("deleted", 38, AUDIT_ID.format(row38.id)),
    }
    await restore(sessions, row37)
    assert (await verdict(sessions))["ok"] is True

    # Inserted between rows 50 and 51 with a hash of its own and a link to row 50, the later rows
    # renumbered and the head moved on: the newcomer is named.
    forged = uuid.uuid4()
    await sql(
        sessions,
        "UPDATE admin_audit_log SET seq = -seq WHERE seq > 50",
        "UPDATE admin_audit_log SET seq = 1 - seq WHERE seq < 0",
        "INSERT INTO admin_audit_log (id, actor, operation, seq, prev_hash, row_hash) SELECT :f, 'api', 'forged', 51,"
        " row_hash, '\\x00' FROM admin_audit_log WHERE seq = 50",
        *rehash("id = :f"),
        "UPDATE admin_audit_chain SET head_seq = head_seq + 1",
        f=forged,
    )
    assert await verdict(sessions) == {
        "ok": False,
        "checked": 50,
        "head": 101,
        "broken": ("inserted", 51, AUDIT_ID.format(forged)),
    }
    await sql(
        sessions,
        "DELETE FROM admin_audit_log WHERE id = :f",
        "UPDATE admin_audit_log SET seq = -seq WHERE seq > 51",
        "UPDATE admin_audit_log SET seq = -1 - seq WHERE seq < 0",
        "UPDATE admin_audit_chain SET head_seq = head_seq - 1",
        f=forged,
    )
    assert (await verdict(sessions))["ok"] is True

    # Inserted above the head (the trigger gone around, the head left alone): named.
    await sql(
        sessions,
        "INSERT INTO admin_audit_log (id, actor, operation, seq, prev_hash, row_hash) SELECT :f, 'api', 'forged',"
        " 101, row_hash, row_hash FROM admin_audit_log WHERE seq = 100",
        f=forged,
    )
    assert (await verdict(sessions))["broken"] == ("inserted", 101, AUDIT_ID.format(forged))
    await sql(sessions, "DELETE FROM admin_audit_log WHERE id = :f", f=forged)

    # The newest row deleted: the chain's head still names it.
    row100 = await row_at(sessions, 100)
    await sql(sessions, "DELETE FROM admin_audit_log WHERE seq = 100")
    assert (await verdict(sessions))["broken"] == ("deleted", 99, AUDIT_ID.format((await row_at(sessions, 99)).id))
    await restore(sessions, row100)
    assert await verdict(sessions) == {"ok": True, "checked": 100, "head": 100, "broken": None}


def rehash(where: str) -> tuple[str, str]:
    """Statements giving the rows ``where`` selects the hash of their content (as a forger would)."""
    return (
        "SET LOCAL TimeZone = 'UTC'",
        f"UPDATE admin_audit_log a SET row_hash = sha256(a.prev_hash || {content_sql('a')}) WHERE {where}",
    )


async def test_retention_prunes_only_the_oldest_end_and_moves_the_anchor(backend: backends.Backends) -> None:
    """Rows 1-10 and 12 are old, 11 is not: retention takes 1-10 (in batches), keeps 12 (no hole), and
    the rest still verifies; deleting the new oldest row is still found."""
    async with backends.migrated_database(backend.server_url) as url:
        engine = create_async_engine(url)
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        try:
            async with unit_of_work(sessions) as session:
                for seq in range(1, 21):
                    old = seq <= 10 or seq == 12
                    await session.execute(
                        text(
                            "INSERT INTO admin_audit_log (id, at, actor, operation) VALUES (gen_random_uuid(),"
                            " now() - make_interval(days => :days), 'cli', 'retention')"
                        ),
                        {"days": 400 if old else 1},
                    )
            keeping = SimpleNamespace(
                result_retention_seconds=None,
                flow_retention_seconds=None,
                outbox_retention_seconds=None,
                audit_retention_seconds=365 * 86400.0,
            )
            (step,) = steps(cast("Settings", keeping))
            deleted = []
            for batch in (4, 100, 100):
                async with unit_of_work(sessions) as session:
                    deleted.append(await run_step(session, step, batch=batch))
            async with sessions() as session:
                left = list((await session.execute(text("SELECT seq FROM admin_audit_log ORDER BY seq"))).scalars())
                anchor = (await session.execute(text("SELECT tail_seq FROM admin_audit_chain"))).scalar_one()
            assert (deleted, left, anchor) == ([4, 6, 0], list(range(11, 21)), 10)
            assert await verdict(sessions) == {"ok": True, "checked": 10, "head": 20, "broken": None}
            await sql(sessions, "DELETE FROM admin_audit_log WHERE seq = 11")
            assert (await verdict(sessions))["broken"] == (
                "deleted",
                12,
                AUDIT_ID.format((await row_at(sessions, 12)).id),
            )
        finally:
            await engine.dispose()


async def restore(sessions: async_sessionmaker[AsyncSession], row: Any) -> None:
    """Put ``row`` back exactly as it was (around the triggers)."""
    values = dict(row._mapping)
    values["detail"] = json.dumps(values["detail"])
    columns = ", ".join(values)
    placeholders = ", ".join(f"CAST(:{c} AS jsonb)" if c == "detail" else f":{c}" for c in values)
    await sql(
        sessions,
        "DELETE FROM admin_audit_log WHERE id = :id OR seq = :seq",
        f"INSERT INTO admin_audit_log ({columns}) VALUES ({placeholders})",
        **values,
    )


def _pg_json(value: Any) -> str:
    """jsonb's text form: keys by length then bytes, ``", "`` and ``": "`` between items."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_pg_json(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_pg_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


async def test_export_is_exact_and_its_hashes_follow_the_documented_formula(backend: backends.Backends) -> None:
    async with backends.migrated_database(backend.server_url) as url:
        engine = create_async_engine(url)
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        try:
            first, second = uuid.UUID(int=1), uuid.UUID(int=2)
            async with unit_of_work(sessions) as session:
                await session.execute(
                    text(
                        "INSERT INTO admin_audit_log (id, at, actor, role, operation, method, route, target, status,"
                        " detail) VALUES (:a, '2026-01-02T03:04:05.5+00', 'api', 'admin', 'adminCancelFlow', 'POST',"
                        " '/admin/v1/flows/{flow_id}/cancel', 'flow_id=fl_1', 200, '{}'),"
                        " (:b, '2026-01-02T03:04:06+00', 'cli', NULL, 'cliRevokeGrant', NULL, NULL, 'gr_é', 404,"
                        ' \'{"result": "error", "code": "not_found"}\')'
                    ),
                    {"a": first, "b": second},
                )
            async with sessions() as session:
                lines = [line async for line in export_lines(session, since=None)]
            async with sessions() as session:
                later = [
                    line
                    async for line in export_lines(
                        session, since=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC), after_seq=None
                    )
                ]
                none_after = [line async for line in export_lines(session, since=None, after_seq=2)]
        finally:
            await engine.dispose()

    content_one = {
        "id": str(first),
        "at": "2026-01-02T03:04:05.5+00:00",
        "actor": "api",
        "role": "admin",
        "operation": "adminCancelFlow",
        "method": "POST",
        "route": "/admin/v1/flows/{flow_id}/cancel",
        "target": "flow_id=fl_1",
        "status": 200,
        "detail": {},
    }
    content_two = {
        "id": str(second),
        "at": "2026-01-02T03:04:06+00:00",
        "actor": "cli",
        "operation": "cliRevokeGrant",
        "target": "gr_é",
        "status": 404,
        "detail": {"result": "error", "code": "not_found"},
    }
    hash_one = hashlib.sha256(bytes(32) + _pg_json(content_one).encode()).hexdigest()
    hash_two = hashlib.sha256(bytes.fromhex(hash_one) + _pg_json(content_two).encode()).hexdigest()
    assert lines == [
        '{"actor":"api","admin_token_id":null,"at":"2026-01-02T03:04:05.500000+00:00","detail":{},'
        f'"hash":"{hash_one}","id":"au_{first.hex}","method":"POST","operation":"adminCancelFlow",'
        f'"prev_hash":"{GENESIS}","role":"admin","route":"/admin/v1/flows/{{flow_id}}/cancel","seq":1,"status":200,'
        '"target":"flow_id=fl_1"}\n',
        '{"actor":"cli","admin_token_id":null,"at":"2026-01-02T03:04:06+00:00",'
        '"detail":{"code":"not_found","result":"error"},'
        f'"hash":"{hash_two}","id":"au_{second.hex}","method":null,"operation":"cliRevokeGrant",'
        f'"prev_hash":"{hash_one}","role":null,"route":null,"seq":2,"status":404,"target":"gr_é"}}\n',
    ]
    assert later == lines[1:]
    assert none_after == []


async def test_reading_the_log_writes_a_row_of_its_own(
    elicitd: RunningApp, tokens: dict[str, Token], database_url: str, backend: backends.Backends
) -> None:
    admin = tokens["admin"]
    async with elicitd.state.sessions() as session:
        start = (await session.execute(text("SELECT head_seq FROM admin_audit_chain"))).scalar_one()

    async def rows_of(operation: str) -> list[tuple[str, str | None, int | None]]:
        async with elicitd.state.sessions() as session:
            found = await session.execute(
                text(
                    "SELECT actor, role, status FROM admin_audit_log WHERE operation = :o AND seq > :start"
                    " AND (actor = 'cli' OR admin_token_id = :t) ORDER BY seq"
                ),
                {"o": operation, "t": uuid.UUID(admin.id[3:]), "start": start},
            )
            return [(r.actor, r.role, r.status) for r in found]

    async with admin_http(elicitd, admin) as http:
        listed = await http.get("/admin/v1/audit", params={"limit": 1})
        verified = await http.get("/admin/v1/audit/verify")
        exported = await http.get("/admin/v1/audit/export", params={"after_seq": 0})
        refused = await http.get("/admin/v1/audit/export", params={"format": "csv"})
    assert (listed.status_code, verified.status_code, exported.status_code) == (200, 200, 200)
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_request")
    assert verified.json()["ok"] is True and verified.json()["broken"] is None
    assert exported.headers["content-type"].startswith("application/jsonl")
    shown = [json.loads(line) for line in exported.text.splitlines()]
    assert [row["seq"] for row in shown] == list(range(shown[0]["seq"], shown[0]["seq"] + len(shown)))
    assert all(row["prev_hash"] == before["hash"] for before, row in itertools.pairwise(shown))
    # The list read before the export is in it: reading the log is itself a row.
    assert any(row["operation"] == "adminListAudit" and row["admin_token_id"] == admin.id for row in shown)
    assert await rows_of("adminListAudit") == [("api", "admin", 200)]
    assert await rows_of("adminVerifyAudit") == [("api", "admin", 200)]
    assert await rows_of("adminExportAudit") == [("api", "admin", 200), ("api", "admin", 400)]

    env = _cli_env(database_url, backend.redis_url)
    code, out, err = await _cli(env, "audit", "verify")
    assert (code, err) == (0, ""), err
    assert out.startswith("audit chain intact: ")
    code, out, err = await _cli(env, "audit", "export", "--since", "1h")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["operation"] == "adminVerifyAudit"  # the CLI's verify, just now
    code, out, err = await _cli(env, "audit", "--operation", "adminVerifyAudit", "--json")
    assert code == 0, err
    assert [r["actor"] for r in json.loads(out)["items"]][:2] == ["cli", "api"]
    assert [r[0] for r in await rows_of("adminVerifyAudit")] == ["api", "cli"]
    assert [r[0] for r in await rows_of("adminExportAudit")] == ["api", "api", "cli"]
    assert [r[0] for r in await rows_of("adminListAudit")] == ["api", "cli"]


async def test_verify_command_exits_6_naming_the_row(backend: backends.Backends) -> None:
    async with backends.migrated_database(backend.server_url) as url:
        env = _cli_env(url.replace("postgresql+asyncpg://", "postgresql://"), backend.redis_url)
        engine = create_async_engine(url)
        try:
            sessions = async_sessionmaker(engine, expire_on_commit=False)
            async with unit_of_work(sessions) as session:
                await write_audit(session, actor="cli", operation="cliCreateAdminToken", target="x", status=200)
            row = await row_at(sessions, 1)
            await sql(sessions, "UPDATE admin_audit_log SET target = 'someone else' WHERE seq = 1")
        finally:
            await engine.dispose()
        code, out, err = await _cli(env, "audit", "verify")
    assert (code, out) == (6, "")
    assert err == (
        f"elicitd: audit chain broken at seq 1 ({AUDIT_ID.format(row.id)}): edited: "
        "this row's content no longer matches its hash\n"
    )
