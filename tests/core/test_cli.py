"""The ``elicitd`` command against the test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

from sqlalchemy import text

from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp


def _run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        "ELICITD_KEYS": KeyRing.generate_entry("c1"),
    }
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


async def test_servers_create_prints_key_once_and_stores_hash(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    result = _run(
        settings, "servers", "create", "cli-made", "--display-name", "CLI Made", "--provider", "github", "--json"
    )
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["name"] == "cli-made"
    assert created["api_key"].startswith("elk_")
    async with elicitd.state.sessions() as session:
        stored = (
            await session.execute(
                text(
                    "SELECT k.key_hash, c.allowed_providers, c.display_name FROM server_client_keys k "
                    "JOIN server_clients c ON c.id = k.server_client_id WHERE c.name = 'cli-made'"
                )
            )
        ).one()
    assert created["api_key"].encode() not in bytes(stored[0])
    assert list(stored[1]) == ["github"]
    assert stored[2] == "CLI Made"
    # The key works against the API.
    async with elicitd.http(created["api_key"]) as http:
        response = await http.get("/v1/flows/fl_" + "0" * 32)
    assert response.status_code == 404
    duplicate = _run(settings, "servers", "create", "cli-made")
    assert duplicate.returncode == 2
    assert "already exists" in duplicate.stderr
    bad = _run(settings, "servers", "create", "Bad Name!")
    assert bad.returncode == 2


def test_keys_generate_is_a_valid_ring_entry() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", "generate", "--key-id", "k9"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    ring = KeyRing.parse(result.stdout.strip(), name="generated")
    assert ring.current[0] == "k9"


def test_missing_configuration_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "servers", "create", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "ELICITD_DATABASE_URL is required" in result.stderr
