"""``elicitd dev`` (what ``make run`` calls) and ``elicitd migrate``, run as real processes."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from service.embedded import free_port
from tests.support import backends

ROOT = Path(__file__).resolve().parents[2]


def test_dev_serves_on_embedded_backends_and_prints_how_to_call_it() -> None:
    # Under the repository like `make run`'s .data/: pytest's own temporary directories are private
    # to root, and the embedded PostgreSQL runs as its own system user.
    data = ROOT / ".data" / "test" / f"dev-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env["ELICITD_DATA_DIR"] = str(data)
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "dev", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            if "Uvicorn running" in line or "Application startup complete" in line:
                break
        text = "".join(output)
        assert f"elicitd is serving at http://127.0.0.1:{port}" in text, text
        key = re.search(r"dev API key:\s+(elk_\S+)", text)
        assert key is not None
        assert "curl -s -X POST" in text
        assert (data / "dev-api-key").read_text().strip() == key.group(1)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready == {"status": "ready", "postgres": "ok", "redis": "ok", "wakeups": "redis"}
        created = httpx.post(
            f"http://127.0.0.1:{port}/v1/flows",
            timeout=10,
            headers={"Authorization": f"Bearer {key.group(1)}"},
            json={
                "subject": {"iss": "https://id.example.com", "sub": "u-123"},
                "kind": "external",
                "url": "http://127.0.0.1:9000/step",
            },
        )
        assert created.status_code == 201
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(data, ignore_errors=True)


def test_migrate_builds_the_schema_in_an_empty_database(backend: backends.Backends) -> None:
    url = asyncio.run(backends.create_database(backend.server_url))
    try:
        env = {**os.environ, "ELICITD_DATABASE_URL": url}
        result = subprocess.run(
            [sys.executable, "-m", "service.cli", "migrate"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "migrated to head"

        async def tables() -> set[str]:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                version = await conn.fetchval("SELECT version_num FROM alembic_version")
            finally:
                await conn.close()
            return {r["tablename"] for r in rows} | {f"version:{version}"}

        found = asyncio.run(tables())
        assert {
            "flows",
            "flow_events",
            "server_clients",
            "server_client_keys",
            "webhook_outbox",
            "issuers",
            "browser_sessions",
            "providers",
            "connections",
            "payments",
            "admin_tokens",
        } <= found
        heads = sorted(
            p.name.split("_")[0]
            for p in (Path(__file__).resolve().parents[2] / "migrations" / "versions").glob("0*.py")
        )
        assert f"version:{heads[-1]}" in found
    finally:
        asyncio.run(backends.drop_database(backend.server_url, url))
