"""Key rotation over the encrypted-column registry, the config file, and the issuers CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.config_file import apply_config_file
from service.crypto.aead import SealError
from service.crypto.columns import ENCRYPTED_COLUMNS
from service.crypto.vault import Vault
from service.db.engine import make_engine, make_sessionmaker
from service.errors import ConfigurationError
from service.identity.issuers import SECRET_PURPOSE, IssuerConfig, IssuerDirectory, upsert_issuer
from service.rotation import GRANTS_LABEL, rotate
from service.settings import KeyRing
from tests.support import backends
from tests.support.oauth_server import OAuthServer

OLD = KeyRing.generate_entry("old1")
NEW = KeyRing.generate_entry("new1")


@pytest.fixture
async def own_database(backend: backends.Backends) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """A database of its own: rotation rewrites every row, which must not touch other tests' data."""
    from service.settings import Settings

    async with backends.migrated_database(backend.server_url) as url:
        engine = make_engine(
            Settings(
                database_url=url, redis_url=None, public_url="http://127.0.0.1:1", keys=KeyRing.parse(OLD, name="k")
            )
        )
        try:
            yield make_sessionmaker(engine)
        finally:
            await engine.dispose()


async def _secret_rows(sessions: async_sessionmaker[AsyncSession]) -> dict[uuid.UUID, tuple[str, bytes]]:
    async with sessions() as session:
        rows = await session.execute(
            text("SELECT id, client_secret_key_id, client_secret_enc FROM issuers WHERE client_secret_enc IS NOT NULL")
        )
        return {r.id: (r.client_secret_key_id, r.client_secret_enc) for r in rows}


async def test_rotate_reencrypts_old_rows_and_reports_tampered(own_database: async_sessionmaker[AsyncSession]) -> None:
    old_vault = Vault(KeyRing.parse(OLD, name="old"))
    ids = []
    async with own_database() as session:
        for n in range(7):
            ids.append(
                await upsert_issuer(
                    session,
                    old_vault,
                    IssuerConfig(issuer=f"https://id{n}.example", client_id=f"c{n}", client_secret=f"secret-{n}"),
                )
            )
        await session.commit()
    # Tamper: move row 0's ciphertext onto row 1 (another owner) — it must not decrypt, nor rotate.
    rows = await _secret_rows(own_database)
    async with own_database() as session:
        await session.execute(
            text("UPDATE issuers SET client_secret_enc = :b WHERE id = :i"), {"b": rows[ids[0]][1], "i": ids[1]}
        )
        await session.commit()

    ring = KeyRing.parse(f"{NEW},{OLD}", name="ring")
    report = await rotate(own_database, Vault(ring), batch=3)
    assert report.rotated["issuers.client_secret_enc"] == 6
    assert report.failed["issuers.client_secret_enc"] == [str(ids[1])]
    assert report.remaining["issuers.client_secret_enc"] == 0
    assert not report.ok

    after = await _secret_rows(own_database)
    new_only = Vault(KeyRing.parse(NEW, name="new"))
    for n, issuer_id in enumerate(ids):
        key_id, blob = after[issuer_id]
        if n == 1:
            assert key_id == "old1"
            with pytest.raises(SealError):
                Vault(ring).decrypt(key_id, blob, owner=str(issuer_id), purpose=SECRET_PURPOSE)
            continue
        assert key_id == "new1"
        assert new_only.decrypt_text(key_id, blob, owner=str(issuer_id), purpose=SECRET_PURPOSE) == f"secret-{n}"

    # Idempotent: a second run finds nothing new to do.
    again = await rotate(own_database, Vault(ring))
    assert again.rotated["issuers.client_secret_enc"] == 0


def test_registry_names_existing_columns() -> None:
    labels = [c.label for c in ENCRYPTED_COLUMNS]
    assert "issuers.client_secret_enc" in labels
    assert "login_attempts.secrets_enc" in labels
    assert "server_clients.webhook_secret_enc" in labels
    assert len(labels) == len(set(labels))


async def test_config_file_applies_issuers(
    own_database: async_sessionmaker[AsyncSession], tmp_path: Path, issuer_server: OAuthServer
) -> None:
    vault = Vault(KeyRing.parse(OLD, name="k"))
    path = tmp_path / "elicitd.toml"
    path.write_text(f"""
[[issuers]]
issuer = "{issuer_server.issuer}"
client_id = "from-file"
client_secret_env = "TEST_ISSUER_SECRET"
display_name = "File ID"
scopes = ["openid", "email"]
""")
    counts = await apply_config_file(path, own_database, vault, env={"TEST_ISSUER_SECRET": "s3cret"})
    assert counts == {"issuers": 1}
    directory = IssuerDirectory(own_database, vault)
    try:
        resolved = await directory.resolve(issuer_server.issuer)
        assert resolved is not None
        assert (resolved.client_id, resolved.client_secret, resolved.display_name) == ("from-file", "s3cret", "File ID")
        assert resolved.scopes == ("openid", "email")
        assert resolved.token_endpoint == issuer_server.token_endpoint
        assert resolved.iss_parameter_supported is True
        assert resolved.token_auth_method == "client_secret_basic"
        assert "s3cret" not in repr(resolved)
    finally:
        await directory.close()
    async with own_database() as session:
        fetched = (await session.execute(text("SELECT metadata_fetched_at FROM issuers"))).scalar_one()
    assert fetched is not None  # discovery cached in the row for other replicas

    yaml_path = tmp_path / "elicitd.yaml"
    yaml_path.write_text("issuers:\n  - issuer: https://x.example\n    client_id: c\n    client_secret: inline\n")
    with pytest.raises(ConfigurationError, match="client_secret_env"):
        await apply_config_file(yaml_path, own_database, vault, env={})
    yaml_path.write_text("isuers: []\n")
    with pytest.raises(ConfigurationError, match="unknown sections"):
        await apply_config_file(yaml_path, own_database, vault, env={})


def test_issuers_cli(database_url: str, issuer_server: OAuthServer) -> None:
    issuer = issuer_server.issuer
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": database_url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
        "ELICITD_KEYS": OLD,
        "CLI_ISSUER_SECRET": "cli-secret-value",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    added = run(
        "issuers",
        "add",
        "--issuer",
        issuer,
        "--client-id",
        "cli-client",
        "--client-secret-env",
        "CLI_ISSUER_SECRET",
        "--display-name",
        "CLI ID",
    )
    assert added.returncode == 0, added.stderr
    listed = run("issuers", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "cli-secret-value" not in listed.stdout
    rows = {r["issuer"]: r for r in json.loads(listed.stdout)}
    assert rows[issuer]["client_secret"] == "set"
    assert rows[issuer]["enabled"] is True
    assert run("issuers", "disable", issuer).returncode == 0
    assert {r["issuer"]: r for r in json.loads(run("issuers", "list", "--json").stdout)}[issuer]["enabled"] is False
    missing = run("issuers", "disable", "https://nobody.example")
    assert missing.returncode == 1  # not found
    bad = run("issuers", "add", "--issuer", "http://evil.example", "--client-id", "x")
    assert bad.returncode == 1 and "https" in bad.stderr  # refused input


async def test_every_registered_column_exists(own_database: async_sessionmaker[AsyncSession]) -> None:
    """A registry entry naming a wrong table or column would make rotation fail in production."""
    ring = KeyRing.parse(f"{NEW},{OLD}", name="ring")
    report = await rotate(own_database, Vault(ring))
    assert set(report.rotated) == {c.label for c in ENCRYPTED_COLUMNS} | {GRANTS_LABEL}
    assert report.ok
