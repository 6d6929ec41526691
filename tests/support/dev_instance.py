"""``elicitd dev`` (what ``make run`` runs) as a subprocess, on a free port with its own data
directory: the embedded PostgreSQL and Redis, the migrations, the dev server client, Dev ID and
Demo Files, exactly as a person gets them from a fresh clone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from tests.support.apps import free_port
from tests.support.docs import ROOT

# What `make run` leaves unset, so the instance finds nothing of the test run's configuration.
_CONFIGURATION = ("DATABASE_URL", "REDIS_URL", "PUBLIC_URL", "CONFIG_FILE", "KEYS", "SIGNING_KEY", "DEV", "LOG_JSON")


@dataclass
class DevInstance:
    url: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def api_key(self) -> str:
        return (self.data_dir / "dev-api-key").read_text().strip()

    @property
    def dev_issuer(self) -> str:
        return f"{self.url}/dev/id"


def dev_environment(data_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.removeprefix("ELICITD_") not in _CONFIGURATION}
    env["ELICITD_DATA_DIR"] = str(data_dir)
    env.update(extra or {})
    return env


def run_dev(data_dir: Path, port: int, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "elicitd"), "dev", "--port", str(port)],
            cwd=ROOT,
            env=dev_environment(data_dir, env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a failed test can end everything it started
        )


@contextlib.contextmanager
def dev_instance(
    data_dir: Path, *, env: Mapping[str, str] | None = None, startup_timeout: float = 180.0
) -> Iterator[DevInstance]:
    """Start ``elicitd dev``, wait until ``/readyz`` answers 200, stop it with Ctrl+C (SIGINT)."""
    port = free_port()
    log = data_dir.parent / f"elicitd-dev-{port}.log"
    process = run_dev(data_dir, port, log, env)
    instance = DevInstance(url=f"http://127.0.0.1:{port}", port=port, data_dir=data_dir, process=process, log=log)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"elicitd dev exited with {process.returncode}:\n{instance.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{instance.url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"elicitd dev did not become ready:\n{instance.output()}")
            time.sleep(0.2)
        yield instance
    finally:
        stop(process, data_dir)


def stop(process: subprocess.Popen[bytes], data_dir: Path) -> None:
    """Ctrl+C, as a person stops ``make run``; then make sure the embedded PostgreSQL this instance
    started is gone too, even when the instance failed half-way through starting it."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    pid_file = data_dir / "postgres" / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, IndexError, psutil.Error):
        postmaster = psutil.Process(int(pid_file.read_text().splitlines()[0]))
        if str(data_dir / "postgres") in postmaster.cmdline():  # that very server, not a reused pid
            postmaster.terminate()
