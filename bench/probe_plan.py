"""The probe pass's claim with and without migration 0019's indexes, at a size that shows it.

``python bench/probe_plan.py [--rows 100000]`` makes a scratch database on the PostgreSQL server
of ``ELICITD_BENCH_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``), migrates it to
0018, fills it with ``--rows`` connections (nine in ten OAuth, each with one authorization checked
within the last five hours, one in fifty revoked; the rest API keys), and runs the two claim
statements of a probe pass (``service.connections.probes`` and ``key_probes``, batch 100) under
``EXPLAIN ANALYZE`` in a transaction that is rolled back: with nothing due, with about 2 % due, and
with everything due. Then it upgrades to 0019 and measures again. It ends with one JSON line (the
best of five runs of each, in milliseconds, and the plan's first scan node) and drops the database.
The figures in docs/connections.md come from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import uuid
from typing import Any

import asyncpg

from service.connections import key_probes, probes
from service.db.migrate import upgrade_async

_SEED = """
INSERT INTO providers (name, display_name, client_id) VALUES ('files', 'Files', 'c'), ('mail', 'Mail', 'c');
INSERT INTO providers (name, display_name, client_id, token_auth_method, auth_type, api_key_config)
VALUES ('keys', 'Keys', '', 'none', 'api_key', '{{}}');
INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, status, health, token_type,
                         access_token_enc, access_token_key_id, checked_at)
SELECT gen_random_uuid(), 'https://id.example', 'u' || g,
       CASE WHEN g % 10 = 0 THEN 'keys' WHEN g % 2 = 0 THEN 'files' ELSE 'mail' END, 'a' || g,
       CASE WHEN g % 50 = 1 THEN 'revoked' ELSE 'active' END, CASE WHEN g % 50 = 1 THEN 'revoked' ELSE 'healthy' END,
       CASE WHEN g % 10 = 0 THEN 'api_key' ELSE 'Bearer' END, '\\x00', 'k', now() - (g % 3600) * interval '5 seconds'
FROM generate_series(1, {rows}) g;
INSERT INTO authorizations (id, connection_id, subject_iss, subject_sub, provider, account_id, status, health,
                            access_token_enc, access_token_key_id, refresh_token_enc, refresh_token_key_id,
                            expires_at, checked_at)
SELECT c.id, c.id, c.subject_iss, c.subject_sub, c.provider, c.account_id, c.status, c.health, '\\x00', 'k',
       '\\x00', 'k', now() + interval '1 hour' + random() * interval '1 hour', c.checked_at
FROM connections c WHERE c.token_type = 'Bearer';
"""

# Checked within the last five hours: none due at six, about 2 % at 4.9, all at zero.
_DUE = {"none": 6 * 3600.0, "2%": 4.9 * 3600.0, "all": 0.0}


def _positional(sql: str, names: list[str]) -> str:
    return re.sub(r"(?<!:):([a-z_]+)", lambda m: f"${names.index(m.group(1)) + 1}", sql)


async def _measure(db: asyncpg.Connection) -> dict[str, Any]:
    claims: dict[str, tuple[str, dict[str, Any]]] = {
        "oauth": (probes._CLAIM_DUE, {"providers": ["files", "mail"], "margin": 60.0}),
        "api_key": (key_probes._CLAIM_DUE, {"providers": ["keys"]}),
    }
    found: dict[str, Any] = {}
    for half, (sql, extra) in claims.items():
        for label, interval in _DUE.items():
            args: dict[str, Any] = {"claim": uuid.uuid4(), "hold": 20.0, **extra, "interval": interval, "batch": 100}
            statement = "EXPLAIN (ANALYZE) " + _positional(sql, list(args))
            best: tuple[float, str] | None = None
            for _ in range(5):
                transaction = db.transaction()
                await transaction.start()
                plan = "\n".join(r[0] for r in await db.fetch(statement, *args.values()))
                await transaction.rollback()
                took = float(re.findall(r"Execution Time: ([\d.]+)", plan)[0])
                if best is None or took < best[0]:
                    best = (took, plan)
            assert best is not None
            scan = re.search(r"(Seq Scan|Index Scan using \w+|Bitmap Heap Scan) on \w+", best[1])
            found[f"{half}_{label}"] = {
                "ms": best[0],
                "scan": scan.group(0) if scan else None,
                "sort": "Sort" in best[1],
            }
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    server = os.environ.get("ELICITD_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
    name = f"elicitd_probe_plan_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(f"{server}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{server}/{name}".replace("postgresql://", "postgresql+asyncpg://", 1)
        await upgrade_async(url, "0018")
        db = await asyncpg.connect(f"{server}/{name}")
        try:
            await db.execute(_SEED.format(rows=args.rows))
            await db.execute("VACUUM ANALYZE connections")
            await db.execute("VACUUM ANALYZE authorizations")
            before = await _measure(db)
        finally:
            await db.close()
        await upgrade_async(url, "0019")
        db = await asyncpg.connect(f"{server}/{name}")
        try:
            await db.execute("ANALYZE connections")
            await db.execute("ANALYZE authorizations")
            after = await _measure(db)
        finally:
            await db.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    print(json.dumps({"rows": args.rows, "before_0019": before, "after_0019": after}))


if __name__ == "__main__":
    asyncio.run(main())
