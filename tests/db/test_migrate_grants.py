"""Migration 0009 gives each existing connection to the server clients whose completed flows made
or reconnected it (from ``flows.connection_id``, or the ``connection_id`` in the result), for the
scopes those flows asked as far as the connection holds them; nothing else gets a grant."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from service.db.migrate import upgrade_async

BEFORE = "0008"


async def test_grants_come_from_the_flow_history_and_only_from_it(
    new_database: Callable[[], Awaitable[str]],
) -> None:
    url = await new_database()
    await upgrade_async(url, BEFORE)
    db = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        clients = {name: uuid.uuid4() for name in ("creator", "reconnector", "keyholder", "bystander", "failed")}
        for name, client_id in clients.items():
            await db.execute("INSERT INTO server_clients (id, name, display_name) VALUES ($1, $2, $2)", client_id, name)
        await db.execute(
            "INSERT INTO providers (name, display_name, client_id) VALUES ('files', 'Files', 'c'), "
            "('keys', 'Keys', 'c')"
        )
        conns = {name: uuid.uuid4() for name in ("made", "by_result", "untraced", "revoked", "api_key", "wide")}

        async def connection(name: str, provider: str, scopes: list[str], status: str = "active") -> None:
            await db.execute(
                "INSERT INTO connections (id, subject_iss, subject_sub, provider, account_id, scopes, status) "
                "VALUES ($1, 'https://id', $2, $3, $2, $4, $5)",
                conns[name],
                name,
                provider,
                scopes,
                status,
            )

        await connection("made", "files", ["files:read", "files:write"])
        await connection("by_result", "files", ["files:read"])
        await connection("untraced", "files", ["files:read"])
        await connection("revoked", "files", ["files:read"], status="revoked")
        await connection("api_key", "keys", [])
        await connection("wide", "files", ["files:read"])

        async def flow(
            client: str,
            kind: str,
            *,
            status: str = "completed",
            column: str | None = None,
            in_result: str | None = None,
            scopes: list[str] | None = None,
        ) -> uuid.UUID:
            flow_id = uuid.uuid4()
            result = {"connection_id": "cn_" + conns[in_result].hex} if in_result else None
            await db.execute(
                "INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, provider, scopes, reuse_key, "
                "message, status, result, connection_id, expires_at, completed_at) VALUES ($1, $2, $3, 'https://id', "
                "'s', 'files', $4, $5, 'm', $6, $7::jsonb, $8, now() + interval '1 hour', now())",
                flow_id,
                clients[client],
                kind,
                scopes or [],
                uuid.uuid4().hex,
                status,
                None if result is None else json.dumps(result),
                conns[column] if column else None,
            )
            return flow_id

        await flow("creator", "oauth_connect", column="made", scopes=["files:read"])
        latest = await flow("creator", "oauth_connect", column="made", scopes=["files:write", "files:admin"])
        await flow("reconnector", "oauth_connect", in_result="by_result", scopes=["files:read"])
        await flow("creator", "oauth_connect", column="revoked", scopes=["files:read"])
        await flow("keyholder", "api_key", column="api_key")
        await flow("failed", "oauth_connect", status="failed", column="untraced", scopes=["files:read"])
        await flow("bystander", "external", in_result="untraced")
        await flow("bystander", "oauth_connect", column="wide")  # asked for no scope: the connection's

        await upgrade_async(url, "0009")
        rows = await db.fetch(
            "SELECT g.connection_id, sc.name, g.trust_group_id, g.scopes, g.origin, g.flow_id, g.revoked_at "
            "FROM grants g JOIN server_clients sc ON sc.id = g.server_client_id ORDER BY sc.name, g.connection_id"
        )
    finally:
        await db.close()
    names = {value: key for key, value in conns.items()}
    got = sorted((names[r[0]], r[1], list(r[3]), r[4], r[6]) for r in rows)
    assert got == [
        ("api_key", "keyholder", [], "migration", None),
        ("by_result", "reconnector", ["files:read"], "migration", None),
        ("made", "creator", ["files:read", "files:write"], "migration", None),
        ("wide", "bystander", ["files:read"], "migration", None),
    ]
    assert all(r[2] is None for r in rows)  # no groups exist yet: each client is its own grantee
    assert next(r[5] for r in rows if r[0] == conns["made"]) == latest  # created by its latest flow
