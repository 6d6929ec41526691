"""The client library stays light: importing it loads neither the service nor its stack."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_client_imports_without_the_service_stack() -> None:
    code = (
        "import sys, elicitd_client, elicitd_client.webhooks; "
        "heavy = sorted(m for m in ('service', 'litestar', 'sqlalchemy', 'asyncpg', 'redis', 'stripe', "
        "'alembic', 'authlib') if m in sys.modules); print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, cwd=ROOT
    )
    assert result.stdout.strip() == ""


def test_the_bare_distribution_and_client_extra_need_only_httpx() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == ["httpx==0.28.1"]
    assert project["optional-dependencies"]["client"] == ["httpx==0.28.1"]
    assert project["optional-dependencies"]["mcp"] == ["httpx==0.28.1", "mcp==2.3.0", "pyjwt[crypto]>=2.10,<3"]
    server = project["optional-dependencies"]["server"]
    assert any(dep.startswith("litestar") for dep in server)
    # Every dependency is pinned exactly.
    for group in [project["dependencies"], *project["optional-dependencies"].values()]:
        for dep in group:
            assert "==" in dep, dep
