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
import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from service.services import BACKGROUND_STOP_SECONDS, SHUTDOWN_SECONDS
from service.settings import KeyRing
from tests.support import backends, containers
from tests.support.apps import free_port
from tests.support.live import external_flow, until_ready

BASE = containers.BASE
UID = 10001
# What the Deployment gives the long-poll (ELICITD_MAX_WAIT_SECONDS in deploy/kubernetes/base).
MAX_WAIT = 30
_UNPROVEN = ("--subject-proof", "none", "--json")


def _limits() -> list[str]:
    files, processes = containers.limits()
    return ["--ulimit", f"nofile={files}:{files}", "--ulimit", f"nproc={processes}:{processes}"]


def _run(command: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return containers.run(command, timeout)


@contextlib.asynccontextmanager
async def _reachable_from_containers(url: str) -> AsyncIterator[str]:
    """``url`` as a container on the host network can use it. A server on TCP is used as it is; a
    server on a Unix socket only (the embedded PostgreSQL of ``make test``, whose socket is in a
    directory only its own user may enter) is relayed on a loopback port for as long as the test
    needs it."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.hostname or "host" not in query:
        yield url
        return
    socket_path = f"{query['host'][0]}/.s.PGSQL.{query.get('port', ['5432'])[0]}"

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rest = {key: value for key, value in query.items() if key not in ("host", "port")}
    user = parts.username or "postgres"
    credentials = f"{user}:{parts.password}" if parts.password else user
    try:
        yield urlunsplit((parts.scheme, f"{credentials}@127.0.0.1:{port}", parts.path, urlencode(rest, doseq=True), ""))
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_the_image_builds_runs_as_non_root_and_stops_on_sigterm(
    backend: backends.Backends, tmp_path: Path
) -> None:
    containers.require("podman", "debootstrap")
    podman = "podman"
    await asyncio.to_thread(containers.ensure_base)
    tag = f"localhost/elicitd:test-{secrets.token_hex(4)}"
    build = [
        podman,
        "build",
        "--layers=false",
        "--network",
        "host",
        *_limits(),
        "--build-arg",
        f"BASE={BASE}",
        "-t",
        tag,
    ]
    built = await asyncio.to_thread(_run, [*build, str(containers.build_context(tmp_path / "context"))], 900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    url = await backends.create_database(backend.server_url)
    relayed = _reachable_from_containers(url)
    reachable = await relayed.__aenter__()
    port = free_port()
    name = f"elicitd-test-{secrets.token_hex(4)}"
    env = {
        "ELICITD_DATABASE_URL": reachable,
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
            ready = await until_ready(http, what="the container", timeout=90, pause=0.3)
            assert ready.json()["schema"] == "current" and ready.json()["wakeups"] == "redis"
            auth = {"Authorization": f"Bearer {key}"}
            flow = await external_flow(http, auth, "image")
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
        await relayed.__aexit__(None, None, None)
        await backends.drop_database(backend.server_url, url)
