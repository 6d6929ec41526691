"""The Dockerfile, built and run: podman builds the image (no Docker daemon) from a base that
``deploy/image/local-base.sh`` makes with debootstrap from Debian's packages, since no registry
image can be pulled where only Debian and PyPI are reachable. The container then runs as the
deployment runs it — uid 10001, read-only root filesystem, every capability dropped, no new
privileges — against real PostgreSQL and Redis: ``elicitd migrate``, ``elicitd servers create``,
``elicitd serve``, the contract calls, and a stop on SIGTERM that answers the parked long-poll
first and ends well inside the Deployment's grace period.

podman and debootstrap are required, never skipped: `.ci/run` installs them (Debian's ``podman``
and ``debootstrap`` packages). The base image is made once per machine and kept
(``localhost/elicitd-base:bookworm``); the image is built by every run and removed after it.
"""

from __future__ import annotations

import asyncio
import json
import resource
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from service.services import BACKGROUND_STOP_SECONDS, SHUTDOWN_SECONDS
from service.settings import KeyRing
from tests.support import backends
from tests.support.apps import free_port
from tests.support.packaging import ROOT, dockerfile_sources

BASE = "localhost/elicitd-base:bookworm"
UID = 10001
# What the Deployment gives the long-poll (ELICITD_MAX_WAIT_SECONDS in deploy/kubernetes/base).
MAX_WAIT = 30
_UNPROVEN = ("--subject-proof", "none", "--json")


def _podman() -> str:
    podman = shutil.which("podman")
    missing = [tool for tool in ("podman", "debootstrap") if shutil.which(tool) is None]
    if podman is None or missing:
        pytest.fail(f"{', '.join(missing)} not installed: apt-get install podman debootstrap (.ci/run does)")
    return podman


def _limits() -> list[str]:
    """podman's default limits (1,048,576 open files, 32,768 processes) may be more than this
    host lets a container have, and then no container starts ("error setting rlimit"). These stay
    within the host's own and are plenty for one elicitd process."""
    files = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    return ["--ulimit", f"nofile={files}:{files}", "--ulimit", "nproc=4096:4096"]


def _run(command: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _ensure_base(podman: str) -> None:
    if _run([podman, "image", "exists", BASE]).returncode == 0:
        return
    made = _run([str(ROOT / "deploy" / "image" / "local-base.sh")], timeout=900)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]


def _context(tmp_path: Path) -> Path:
    """Exactly what the Dockerfile copies, as .dockerignore lets it in."""
    context = tmp_path / "context"
    context.mkdir()
    for source in [*dockerfile_sources(), "Dockerfile", ".dockerignore"]:
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, context / source)
    return context


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_the_image_builds_runs_as_non_root_and_stops_on_sigterm(
    backend: backends.Backends, tmp_path: Path
) -> None:
    podman = _podman()
    await asyncio.to_thread(_ensure_base, podman)
    tag = f"localhost/elicitd:test-{secrets.token_hex(4)}"
    build = [podman, "build", "--network", "host", *_limits(), "--build-arg", f"BASE={BASE}", "-t", tag]
    built = await asyncio.to_thread(_run, [*build, str(_context(tmp_path))], 900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    url = await backends.create_database(backend.server_url)
    port = free_port()
    name = f"elicitd-test-{secrets.token_hex(4)}"
    env = {
        "ELICITD_DATABASE_URL": url,
        "ELICITD_REDIS_URL": backend.redis_url,
        "ELICITD_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        "ELICITD_REDIS_CHANNEL": f"elicitd:image:{port}",
        "ELICITD_MAX_WAIT_SECONDS": str(MAX_WAIT),
    }
    # As the Deployment runs it (deploy/kubernetes/base/deployment.yaml).
    hardened = [
        *("--network", "host", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL"),  # noqa: S108 - the container's own /tmp
        *("--security-opt", "no-new-privileges", *_limits()),
        *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
    ]
    try:
        who = await asyncio.to_thread(_run, [podman, "run", "--rm", *hardened, tag, "id", "-u"])
        assert (who.returncode, who.stdout.strip()) == (0, str(UID)), who.stderr
        migrated = await asyncio.to_thread(
            _run, [podman, "run", "--rm", *hardened, tag, "elicitd", "migrate", "--json"]
        )
        assert migrated.returncode == 0, migrated.stderr
        applied = json.loads(migrated.stdout)["applied"]
        assert applied[0] == "0001" and applied == sorted(applied)
        created = await asyncio.to_thread(
            _run,
            [podman, "run", "--rm", *hardened, tag, *("elicitd", "servers", "create", "contract"), *_UNPROVEN],
        )
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)["api_key"]

        serve = [podman, "run", "-d", "--name", name, *hardened, tag]
        started = await asyncio.to_thread(
            _run, [*serve, "elicitd", "serve", "--host", "127.0.0.1", "--port", str(port)]
        )
        assert started.returncode == 0, started.stderr
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=MAX_WAIT + 10) as http:
            deadline = time.monotonic() + 90
            while True:
                try:
                    ready = await http.get("/readyz")
                    if ready.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the container did not become ready"
                await asyncio.sleep(0.3)
            assert ready.json()["schema"] == "current" and ready.json()["wakeups"] == "redis"
            auth = {"Authorization": f"Bearer {key}"}
            made = await http.post(
                "/v1/flows",
                headers=auth,
                json={
                    "subject": {"iss": "https://id.example.com", "sub": "image"},
                    "kind": "external",
                    "url": "https://app.example.com/step",
                },
            )
            assert made.status_code == 201, made.text
            flow = made.json()["flow"]["id"]
            read = await http.get(f"/v1/flows/{flow}", headers=auth)
            assert (read.status_code, read.json()["flow"]["status"]) == (200, "pending")

            # SIGTERM while a long-poll is parked: it is answered (still pending, after its wait),
            # then the process ends, within the wait plus the app's own shutdown.
            parked = asyncio.create_task(http.get(f"/v1/flows/{flow}?wait_seconds=5", headers=auth))
            await asyncio.sleep(1.0)
            sent = time.monotonic()
            stopped = await asyncio.to_thread(_run, [podman, "kill", "--signal", "TERM", name])
            assert stopped.returncode == 0, stopped.stderr
            answer = await parked
            assert (answer.status_code, answer.json()["flow"]["status"]) == (200, "pending")
        waited = await asyncio.to_thread(_run, [podman, "wait", name], MAX_WAIT + 30)
        took = time.monotonic() - sent
        assert waited.stdout.strip() == "0", waited.stdout + waited.stderr
        assert took < 5 + BACKGROUND_STOP_SECONDS + SHUTDOWN_SECONDS, took
        logs = await asyncio.to_thread(_run, [podman, "logs", name])
        assert "Traceback" not in logs.stdout + logs.stderr
        assert "Application shutdown complete" in logs.stdout + logs.stderr
    finally:
        await asyncio.to_thread(_run, [podman, "rm", "--force", name])
        await asyncio.to_thread(_run, [podman, "rmi", "--force", tag])
        await backends.drop_database(backend.server_url, url)
