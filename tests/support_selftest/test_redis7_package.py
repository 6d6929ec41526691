"""The Redis 7 the cluster tests use on a machine without one: Debian's package, unpacked."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from service.embedded import free_port
from tests.support.redis_cluster import _debian, _major


def test_debian_redis_7_is_fetched_unpacked_and_runs(tmp_path: Path) -> None:
    found = _debian(tmp_path / "redis7")
    assert found is not None, "apt-get download of Debian's redis-tools failed"
    assert found.server.is_relative_to(tmp_path) and found.cli.is_relative_to(tmp_path)
    assert _major(found.server, found.env) == 7
    # It serves: a server on a free port, in cluster mode, answers redis-cli.
    port = free_port()
    # The bus port is named: port + 10,000 may not exist for a high free port.
    cluster = ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
    server = subprocess.Popen(
        [str(found.server), "--port", str(port), *cluster, "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        env=found.env,
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            answer = subprocess.run(
                [str(found.cli), "-p", str(port), "info", "cluster"],
                env=found.env,
                capture_output=True,
                text=True,
                check=False,
            )
            if answer.returncode == 0 and "cluster_enabled:1" in answer.stdout:
                break
            time.sleep(0.1)  # polling another process's start
        assert "cluster_enabled:1" in answer.stdout
    finally:
        server.terminate()
        server.wait(10)
