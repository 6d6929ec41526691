"""What the command says to a person who has ``make run`` going: a command typed without ``--dev``
is told to add it (not to start another instance), and ``--dev`` answers with the instance's own
public URL where it would otherwise print a placeholder."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from service.dev_instance import hold, write_env
from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp


def command(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update({"ELICITD_DATA_DIR": str(data_dir), "FILES_SECRET": "files-secret"})
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_a_command_without_dev_while_make_run_serves_is_told_to_add_it(tmp_path: Path) -> None:
    data = tmp_path / ".data"
    alone = command(data, "servers", "create", "my-mcp-server")
    assert (alone.returncode, alone.stderr.splitlines()) == (
        3,
        ["elicitd: ELICITD_DATABASE_URL is required (or run `elicitd dev` for embedded ones)"],
    )
    with hold(data, url="http://127.0.0.1:8000"):
        hinted = command(data, "servers", "create", "my-mcp-server")
    assert hinted.returncode == 3
    assert hinted.stderr.splitlines() == [
        f"elicitd: ELICITD_DATABASE_URL is not set, and `elicitd dev` (make run) is running on {data}/: "
        "add --dev to reach it: elicitd --dev servers create my-mcp-server"
    ]


async def test_providers_add_with_dev_names_the_instances_redirect_uri(
    make_settings: Callable[..., Settings], elicitd: RunningApp, tmp_path: Path
) -> None:
    settings = make_settings()
    data = tmp_path / ".data"
    name = f"files-{uuid.uuid4().hex[:6]}"
    with hold(data, url="http://127.0.0.1:8123"):
        write_env(
            data,
            {
                "ELICITD_DATABASE_URL": settings.database_url,
                "ELICITD_PUBLIC_URL": "http://127.0.0.1:8123",
                "ELICITD_KEYS": KeyRing.generate_entry("c1"),
            },
        )
        added = command(
            data, "--dev", "providers", "add", name, "--catalog", "oauth2", "--client-id", "files-client",
            "--client-secret-env", "FILES_SECRET", "--issuer", "http://127.0.0.1:9", "--no-discover",
        )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip().endswith("redirect URI to register there: http://127.0.0.1:8123/connect/callback"), (
        added.stdout
    )
    assert "<ELICITD_PUBLIC_URL>" not in added.stdout
