"""The operator sign-in mark on a real database: one issuer at a time, moved by one statement."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from service.admin.tokens import Role
from service.crypto.vault import Vault
from service.db.engine import make_engine, make_sessionmaker
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.operators.store import mark_issuer
from service.settings import KeyRing, Settings
from tests.support import backends

KEY = KeyRing.generate_entry("k1")
ROLES = {Role.ADMIN: frozenset({"admins"})}


async def test_marking_another_issuer_moves_the_one_mark_and_ends_console_sessions(
    backend: backends.Backends,
) -> None:
    async with backends.migrated_database(backend.server_url) as url:
        settings = Settings(
            database_url=url, redis_url=None, public_url="http://127.0.0.1:1", keys=KeyRing.parse(KEY, name="k")
        )
        engine = make_engine(settings)
        sessions = make_sessionmaker(engine)
        vault = Vault(settings.keys)
        try:
            async with sessions() as session:
                first = await upsert_issuer(session, vault, IssuerConfig(issuer="https://a.example", client_id="e"))
                second = await upsert_issuer(session, vault, IssuerConfig(issuer="https://b.example", client_id="e"))
                await mark_issuer(session, "https://a.example", role_claim="groups", roles=ROLES)
                await session.commit()
                await session.execute(
                    text(
                        "INSERT INTO operator_sessions (id, issuer_id, iss, sub, display_name, role, csrf_secret,"
                        " expires_at) VALUES (:i, :s, 'https://a.example', 'otto', 'Otto', 3, :c, now() + interval '1 h')"
                    ),
                    {"i": uuid.uuid4().bytes, "s": first, "c": b"c" * 32},
                )
                await session.commit()
                # Before: the second mark broke the slot's unique constraint (a 500 from the CLI).
                assert await mark_issuer(session, "https://b.example", role_claim="roles", roles=ROLES) == second
                await session.commit()
                rows = (await session.execute(text("SELECT issuer_id, role_claim FROM operator_signin"))).all()
                left = (await session.execute(text("SELECT count(*) FROM operator_sessions"))).scalar_one()
            assert [(uuid.UUID(str(r.issuer_id)), r.role_claim) for r in rows] == [(second, "roles")]
            assert left == 0
        finally:
            await engine.dispose()
