"""``elicitd migrate`` and its actions (``downgrade``, ``current``, ``history``, ``--sql``): what an
installed elicitd, which has no ``alembic.ini``, offers instead of stock ``alembic``."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from alembic.script import ScriptDirectory

from service.db.migrate import alembic_config
from tests.db.test_stock_alembic import _alembic, _plain
from tests.support.packaging import ROOT

ALL = tuple(reversed([script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()]))
HEAD = ALL[-1]


async def _elicitd(database_url: str | None, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    if database_url:
        env["ELICITD_DATABASE_URL"] = _plain(database_url)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "migrate",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_migrate_current_downgrade_and_history(empty_database: str) -> None:
    assert await _elicitd(empty_database, "current") == (
        0,
        f"none (an empty database; this elicitd migrates it to {HEAD})\n",
        "",
    )
    code, out, err = await _elicitd(empty_database, "--json")  # plain `elicitd migrate`: up to head
    assert (code, json.loads(out)) == (0, {"revision": "head", "applied": list(ALL)}), err
    assert await _elicitd(empty_database) == (0, "migrated to head (nothing to apply)\n", "")
    code, out, _ = await _elicitd(empty_database, "current", "--json")
    assert (code, json.loads(out)) == (0, {"current": [HEAD], "head": HEAD})

    assert await _elicitd(empty_database, "downgrade", "-1") == (0, f"downgraded to -1 (undid {HEAD})\n", "")
    assert await _elicitd(empty_database, "current") == (0, f"{ALL[-2]} (behind {HEAD})\n", "")
    code, out, _ = await _elicitd(empty_database, "downgrade", "base", "--json")
    assert (code, json.loads(out)) == (0, {"revision": "base", "undone": list(reversed(ALL[:-1]))})
    code, out, _ = await _elicitd(empty_database, ALL[2], "--json")  # a bare revision: an upgrade to it
    assert (code, json.loads(out)["applied"]) == (0, list(ALL[:3]))

    code, out, _ = await _elicitd(None, "history", "--json")  # no database needed
    history = json.loads(out)
    assert [row["revision"] for row in history] == list(reversed(ALL))
    assert [row["head"] for row in history] == [True] + [False] * (len(ALL) - 1)
    assert history[-1]["down_revision"] is None and history[0]["down_revision"] == ALL[-2]


async def test_migrate_sql_writes_what_stock_alembic_writes() -> None:
    code, script, err = await _elicitd(None, "--sql")
    assert code == 0, err
    stock = await _alembic(None, "upgrade", "head", "--sql")
    assert (stock[0], stock[1]) == (0, script)

    # From a given revision; and a downgrade, options after the words as before them.
    code, script, err = await _elicitd(None, "upgrade", f"{ALL[-2]}:head", "--sql")
    assert code == 0, err
    assert f"-- Running upgrade {ALL[-2]} -> {HEAD}" in script and "CREATE TABLE alembic_version" not in script
    code, script, err = await _elicitd(None, "downgrade", "--sql", f"{HEAD}:{ALL[-2]}")
    assert code == 0, err
    assert f"-- Running downgrade {HEAD} -> {ALL[-2]}" in script
    assert "pg_try_advisory_lock" in script and "pg_advisory_unlock" in script


async def test_migrate_refuses_what_it_cannot_do_in_one_line() -> None:
    refusals = {
        ("downgrade",): (2, "downgrade needs a revision (-1 for one step, base for everything)"),
        ("current", "0001"): (2, "current takes no revision"),
        ("history", "--sql"): (2, "--sql writes an upgrade or a downgrade, not history"),
        ("--sql", "--json"): (2, "--sql writes SQL, not JSON"),
        ("0001", "0002"): (2, "one revision, not 2"),
        ("downgrade", "-1", "--force"): (2, "unknown option --force"),
        ("downgrade", "-1", "--sql"): (1, "downgrade with --sql requires <fromrev>:<torev>"),
        ("upgrade", "nope:head", "--sql"): (1, "Can't locate revision identified by 'nope'"),
    }
    for args, (expected_code, message) in refusals.items():
        code, out, err = await _elicitd(None, *args)
        assert (code, out) == (expected_code, ""), (args, err)
        assert len(err.splitlines()) == 1 and message in err, (args, err)
    code, out, err = await _elicitd(None, "current")
    assert (code, err) == (3, "elicitd: ELICITD_DATABASE_URL is required\n")
