"""``elicitd serve --workers N``: N serving processes on one socket, the upkeep in the first, a
process that dies replaced, a stop that ends them all, and a start that fails ending the command."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from service.serve_command import STARTUP_FAILURE, Supervisor
from service.services import SHUTDOWN_SECONDS
from service.serving import drain_seconds
from service.settings import Settings
from tests.support import backends
from tests.support.apps import free_port
from tests.support.live import CLI, external_flow, serve_env, unproven_client, until_ready

MAX_WAIT = 5


def _listening(process: psutil.Process, port: int) -> bool:
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in process.net_connections("tcp"))


async def _children(
    parent: psutil.Process, count: int, *, without: frozenset[int] | set[int] = frozenset()
) -> list[psutil.Process]:
    """The supervisor's serving processes once there are ``count`` of them, none in ``without``."""
    deadline = time.monotonic() + 60
    while True:
        found = [c for c in parent.children() if c.pid not in without and c.is_running()]
        if len(found) == count and len(parent.children()) == count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} serving processes, not {count}"
        await asyncio.sleep(0.1)


async def test_two_processes_serve_one_port_and_the_supervisor_keeps_them(
    backend: backends.Backends, database_url: str
) -> None:
    port = free_port()
    env = serve_env(database_url, backend.redis_url, port, MAX_WAIT_SECONDS=str(MAX_WAIT))
    auth = await unproven_client(env, f"workers-{port}")
    server = subprocess.Popen(
        [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        supervisor = psutil.Process(server.pid)
        first = await _children(supervisor, 2)
        assert all(_listening(child, port) for child in first)
        # Long-polls on their own connections, each woken by a completion made on another: the
        # wake-up reaches whichever process holds the poll.
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=limits) as http:
            await until_ready(http, what="elicitd serve --workers 2", alive=lambda: server.poll() is None)
            flows = [await external_flow(http, auth, f"w{n}") for n in range(6)]
            polls = [
                asyncio.create_task(http.get(f"/v1/flows/{flow}?wait_seconds={MAX_WAIT}", headers=auth))
                for flow in flows
            ]
            await asyncio.sleep(0.5)
            for flow in flows:
                done = await http.post(f"/v1/flows/{flow}/complete", json={"result": {"ok": True}}, headers=auth)
                assert done.status_code == 200, done.text
            answers = await asyncio.wait_for(asyncio.gather(*polls), MAX_WAIT - 1)
            assert [a.json()["flow"]["status"] for a in answers] == ["completed"] * 6
            # One dies: another takes its place, on the same socket, and the port keeps answering.
            victim = first[1]
            victim.kill()
            replaced = await _children(supervisor, 2, without={victim.pid})
            assert {c.pid for c in replaced} & {c.pid for c in first} == {first[0].pid}
            assert all(_listening(child, port) for child in replaced)
            await until_ready(http, what="after a serving process died", alive=lambda: server.poll() is None)
        sent = time.monotonic()
        server.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(server.communicate, timeout=60)
        stopped = time.monotonic() - sent
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert server.returncode == 0, stderr
    assert stopped < drain_seconds(MAX_WAIT) + SHUTDOWN_SECONDS + 2
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in replaced)
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    started = [(line["role"], line["count"]) for line in lines if line["msg"] == "serving process started"]
    # The upkeep runs in the first process only; the one started in place of the one that died
    # takes that one's place (the processes log in whichever order they start).
    assert sorted(started[:2]) == [("serving", 1), ("upkeep", 0)]
    assert started[2] in started[:2]
    assert [line["code"] for line in lines if line["msg"] == "serving process ended; starting another"] == [-9]


def _supervise(settings: Settings, codes: dict[int, int], record: Path) -> None:
    """In a process of its own: a supervisor of three whose processes note their index and the
    upkeep flag, then exit with ``codes[index]`` (default: wait to be stopped)."""

    def serve(given: Settings) -> None:
        index = len(record.read_text().splitlines()) if record.exists() else 0
        with record.open("a") as out:
            out.write(f"{os.getpid()} {given.background_tasks}\n")
        if index in codes:
            raise SystemExit(codes[index])
        signal.pause()

    listening = socket.create_server(("127.0.0.1", 0))
    os._exit(Supervisor(settings, listening, 3, serve).run())


def test_a_process_that_cannot_start_ends_the_command_with_its_code(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings()
    record = tmp_path / "started"
    process = multiprocessing.get_context("fork").Process(target=_supervise, args=(settings, {2: 3}, record))
    process.start()
    process.join(30)
    assert process.exitcode == STARTUP_FAILURE
    started = [line.split() for line in record.read_text().splitlines()]
    assert sorted(flag for _, flag in started) == ["False", "False", "True"]
    assert not any(
        psutil.pid_exists(int(pid)) and psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE for pid, _ in started
    )


def test_a_worker_count_below_one_is_a_usage_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")} | {"ELICITD_WORKERS": "none"}
    for argv, value in ((["--workers", "0"], "'0'"), ([], "'none'")):
        result = subprocess.run(
            [*CLI, "serve", *argv], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            f"elicitd serve: error: argument --workers: a whole number of at least 1, not {value}"
        )
