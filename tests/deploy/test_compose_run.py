"""compose.yaml, started with podman-compose: the migration job, then elicitd in production mode,
answering the contract calls, with an API key made the way the file's header says; then stopped.

Docker Hub cannot be reached here, so compose.yaml's PostgreSQL and Redis images are replaced by
stand-ins built from Debian's packages (tests/support/compose/), and elicitd's image is built
first from the local base (podman-compose cannot pass a build argument over the file's
``build: .``). Two things podman-compose 1.0.3 (Debian bookworm) does not do as Docker Compose
does, both visible in the override: it starts every service at once, ignoring ``depends_on``
conditions (elicitd restarts until the migration job is done, and readiness waits for the
schema), and it passes ``${ELICITD_KEYS:-}`` on literally, so the key ring is set in the override.

podman and podman-compose are required, never skipped: `.ci/run` installs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
from pathlib import Path

import httpx
import pytest

from service.settings import KeyRing
from tests.support import containers
from tests.support.live import external_flow, until_ready
from tests.support.packaging import ROOT

STANDINS = ROOT / "tests" / "support" / "compose"
PORT = 8000  # compose.yaml publishes 127.0.0.1:8000
_UNPROVEN = ("--subject-proof", "none", "--json")


def _port_free() -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", PORT)) != 0


def _api_key(output: str) -> str:
    """The answer of ``servers create --json`` among what podman-compose prints around it (the
    command it ran, log lines, "exit code: 0")."""
    decoder = json.JSONDecoder()
    for start in (i for i, char in enumerate(output) if char == "{"):
        try:
            found, _ = decoder.raw_decode(output, start)
        except ValueError:
            continue
        key = found.get("api_key") if isinstance(found, dict) else None
        if isinstance(key, str):
            return key
    raise AssertionError(f"no API key in {output[-2000:]!r}")


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_compose_migrates_serves_and_stops_with_podman_compose(tmp_path: Path) -> None:
    containers.require("podman", "podman-compose", "debootstrap")
    assert _port_free(), f"127.0.0.1:{PORT} is taken: compose.yaml publishes elicitd there"
    tag = secrets.token_hex(4)
    project = f"elicitdtest{tag}"
    env = {**os.environ, "CONTAINERS_CONF": str(containers.containers_conf(tmp_path))}
    await asyncio.to_thread(containers.ensure_base, env)
    images = {name: f"localhost/elicitd-compose-{name}:{tag}" for name in ("postgres", "redis", "elicitd")}
    context = containers.build_context(tmp_path / "context", ("compose.yaml",))
    builds = [
        ["-f", str(STANDINS / "postgres.Containerfile"), "-t", images["postgres"], str(STANDINS)],
        ["-f", str(STANDINS / "redis.Containerfile"), "-t", images["redis"], str(STANDINS)],
        ["--build-arg", f"BASE={containers.BASE}", "-t", images["elicitd"], str(context)],
    ]
    keys = KeyRing.generate_entry("k1")
    override = context / "standins.yaml"
    override.write_text(
        json.dumps(
            {
                "services": {
                    "postgres": {"image": images["postgres"]},
                    "redis": {"image": images["redis"]},
                    "migrate": {"image": images["elicitd"], "environment": {"ELICITD_KEYS": keys}},
                    "elicitd": {"image": images["elicitd"], "environment": {"ELICITD_KEYS": keys}},
                }
            }
        )
    )
    compose = ["podman-compose", "-p", project, "-f", str(context / "compose.yaml"), "-f", str(override)]
    try:
        for args in builds:
            built = await asyncio.to_thread(
                containers.run, ["podman", "build", "--layers=false", "--network", "host", *args], 900, env
            )
            assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        up = await asyncio.to_thread(containers.run, [*compose, "up", "-d", "--no-build"], 300, env)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORT}", timeout=10) as http:
            # Redis may come up after elicitd (all start at once): it subscribes when it can.
            ready = await until_ready(
                http,
                what="compose's elicitd",
                timeout=180,
                pause=1,
                wanted=lambda ready: bool(ready.json()["wakeups"] == "redis"),
            )
            assert (ready.json()["schema"], ready.json()["wakeups"]) == ("current", "redis")
            migrate = await asyncio.to_thread(
                containers.run,
                ["podman", "inspect", f"{project}_migrate_1", "--format", "{{.State.ExitCode}}"],
                60,
                env,
            )
            assert migrate.stdout.strip() == "0"
            # The first API key, as compose.yaml's header says (`docker compose exec elicitd …`).
            created = await asyncio.to_thread(
                containers.run,
                [*compose, "exec", "-T", "elicitd", *("elicitd", "servers", "create", "compose", *_UNPROVEN)],
                120,
                env,
            )
            assert created.returncode == 0, created.stderr[-2000:]
            key = _api_key(created.stdout)
            auth = {"Authorization": f"Bearer {key}"}
            flow = await external_flow(http, auth, "compose")
            read = await http.get(f"/v1/flows/{flow}", headers=auth)
            assert (read.status_code, read.json()["flow"]["status"]) == (200, "pending")

        stopped = await asyncio.to_thread(
            containers.run, ["podman", "stop", "-t", "30", f"{project}_elicitd_1"], 60, env
        )
        assert stopped.returncode == 0, stopped.stderr
        code = await asyncio.to_thread(
            containers.run, ["podman", "inspect", f"{project}_elicitd_1", "--format", "{{.State.ExitCode}}"], 60, env
        )
        assert code.stdout.strip() == "0"  # SIGTERM: shut down, not killed
    finally:
        await asyncio.to_thread(containers.run, [*compose, "down", "-v"], 300, env)
        await asyncio.to_thread(containers.run, ["podman", "rmi", "--force", *images.values()], 300, env)
