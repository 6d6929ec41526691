"""Who must prove the subject: new server clients do, clients from before the policy do not until
an operator says so, and every place an operator looks (admin API, ``/readyz``, the command) says
which is which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from service.admin.tokens import Role, create_token, parse_lifetime
from service.config_file import apply_config_file
from service.errors import ConfigurationError
from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp, new_server_client
from tests.support.subjects import RESOURCE


async def admin(app: RunningApp) -> httpx.AsyncClient:
    async with app.state.sessions() as session:
        created = await create_token(session, name="policy", role=Role.ADMIN, lifetime=parse_lifetime("1h"))
        await session.commit()
    return httpx.AsyncClient(
        base_url=app.url + "/admin/v1", headers={"Authorization": f"Bearer {created.secret}"}, timeout=30
    )


async def test_the_admin_api_makes_required_the_default_and_flags_what_is_weak(elicitd: RunningApp) -> None:
    async with await admin(elicitd) as http:
        default = (await http.post("/server-clients", json={"name": f"p-{uuid.uuid4().hex[:8]}"})).json()["client"]
        legacy = (
            await http.post("/server-clients", json={"name": f"p-{uuid.uuid4().hex[:8]}", "subject_proof": "none"})
        ).json()["client"]
        fixed = await http.patch(
            f"/server-clients/{legacy['id']}", json={"subject_proof": "required", "resource_uris": [RESOURCE]}
        )
        fragment = await http.patch(f"/server-clients/{legacy['id']}", json={"resource_uris": [RESOURCE + "#x"]})
        listed = (await http.get("/server-clients", params={"limit": 500})).json()["items"]
    assert (default["subject_proof"], default["resource_uris"], default["warnings"]) == (
        "required",
        [],
        ["no_resource_uris"],
    )
    assert (legacy["subject_proof"], legacy["warnings"]) == ("none", ["subject_proof_not_required"])
    assert fixed.status_code == 200
    assert (fixed.json()["subject_proof"], fixed.json()["resource_uris"], fixed.json()["warnings"]) == (
        "required",
        [RESOURCE],
        [],
    )
    assert (fragment.status_code, fragment.json()["code"]) == (400, "invalid_request")
    assert {item["id"]: item["warnings"] for item in listed}[legacy["id"]] == []


async def test_readyz_counts_the_enabled_clients_without_subject_proof(elicitd: RunningApp) -> None:
    async def count() -> int:
        async with elicitd.http() as http:
            return int((await http.get("/readyz")).json()["clients_without_subject_proof"])

    before = await count()
    legacy = await new_server_client(elicitd, subject_proof="none")
    await new_server_client(elicitd, subject_proof="required", resource_uris=[RESOURCE])
    assert await count() == before + 1
    async with await admin(elicitd) as http:
        assert (await http.post(f"/server-clients/{legacy.public_id}/disable")).status_code == 200
    assert await count() == before


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        "ELICITD_KEYS": KeyRing.generate_entry("c1"),
    }
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_servers_create_requires_proof_unless_told_and_says_so(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    strict = cli(settings, "servers", "create", f"s-{uuid.uuid4().hex[:8]}", "--resource-uri", RESOURCE, "--json")
    assert strict.returncode == 0, strict.stderr
    assert (json.loads(strict.stdout)["subject_proof"], json.loads(strict.stdout)["resource_uris"]) == (
        "required",
        [RESOURCE],
    )
    loose = cli(settings, "servers", "create", f"s-{uuid.uuid4().hex[:8]}", "--subject-proof", "none")
    assert loose.returncode == 0, loose.stderr
    assert "subject proof: none (its API key alone names any user)" in loose.stdout
    bare = cli(settings, "servers", "create", f"s-{uuid.uuid4().hex[:8]}")
    assert (
        "subject proof: required, but no resource URI: every call naming a user is refused until one is set"
        in bare.stdout
    )
    wrong = cli(settings, "servers", "create", f"s-{uuid.uuid4().hex[:8]}", "--subject-proof", "maybe")
    assert wrong.returncode == 2


async def test_the_config_file_sets_the_policy_and_registers_missing_clients_without_a_key(
    elicitd: RunningApp, tmp_path: Path
) -> None:
    existing = await new_server_client(elicitd, subject_proof="none")
    declared = f"declared-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "elicitd.toml"
    config.write_text(
        f"""
[[server_clients]]
name = "{existing.name}"
subject_proof = "required"
resource_uris = ["{RESOURCE}"]

[[server_clients]]
name = "{declared}"
display_name = "Declared"
subject_proof = "none"
"""
    )
    for _ in range(2):  # every replica applies it at start: idempotent
        await apply_config_file(config, elicitd.state.sessions, elicitd.state.vault)
    async with elicitd.state.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT c.name, c.display_name, c.subject_proof, c.resource_uris, count(k.id) "
                    "FROM server_clients c LEFT JOIN server_client_keys k ON k.server_client_id = c.id "
                    "WHERE c.name IN (:a, :b) GROUP BY c.id ORDER BY c.name"
                ),
                {"a": existing.name, "b": declared},
            )
        ).all()
    assert sorted(tuple(row) for row in rows) == sorted(
        [
            (existing.name, existing.name, "required", [RESOURCE], 1),
            (declared, "Declared", "none", [], 0),
        ]
    )
    config.write_text('[[server_clients]]\nname = "x"\nsubject_proof = "sometimes"\n')
    with pytest.raises(ConfigurationError) as refused:
        await apply_config_file(config, elicitd.state.sessions, elicitd.state.vault)
    assert "server_clients[0]: subject_proof must be 'required' or 'none'" in refused.value.detail
