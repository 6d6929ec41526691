"""podman for the image tests (tests/deploy/test_image.py, test_compose_run.py): the tools they
need, the base image made from Debian's packages, and container limits this host allows.

podman's default limits (1,048,576 open files, 32,768 processes) can be more than a host lets a
container have; then no container starts ("error setting rlimit type 7: operation not
permitted"). ``containers_conf`` writes limits within the host's own, for ``CONTAINERS_CONF``.
On a host with cgroups v1 and v2 mounted side by side ("hybrid"), crun — podman's default runtime
— refuses every container ("cgroups in hybrid mode not supported"); runc runs them, so there the
file also names runc (`.ci/run` installs it). ``run`` uses that file unless the caller gives one.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.packaging import ROOT

BASE = "localhost/elicitd-base:bookworm"


def require(*tools: str) -> None:
    """Fail (never skip) when a tool is missing: `.ci/run` installs them."""
    needed = (*tools, "runc") if "podman" in tools and hybrid_cgroups() else tools
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: apt-get install {' '.join(missing)} (.ci/run does)")


def run(
    command: list[str], timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ if env is None else env)
    env.setdefault("CONTAINERS_CONF", str(_default_conf()))
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)


@functools.cache
def _default_conf() -> Path:
    return containers_conf(Path(tempfile.mkdtemp(prefix="elicitd-podman-")))


def hybrid_cgroups() -> bool:
    """cgroups v1 controllers with a v2 hierarchy beside them, where crun starts no container."""
    return Path("/sys/fs/cgroup/unified").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists()


def limits() -> tuple[int, int]:
    """Open files and processes for a container: within this host's hard limits, plenty for elicitd."""
    return min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536), 4096


def containers_conf(directory: Path) -> Path:
    files, processes = limits()
    path = directory / "containers.conf"
    engine = '[engine]\nruntime = "runc"\n' if hybrid_cgroups() else ""
    path.write_text(
        f'{engine}[containers]\ndefault_ulimits = ["nofile={files}:{files}", "nproc={processes}:{processes}"]\n'
    )
    return path


def ensure_base(env: dict[str, str] | None = None) -> None:
    """The base image, made once per machine with deploy/image/local-base.sh (about a minute)."""
    if run(["podman", "image", "exists", BASE], env=env).returncode == 0:
        return
    made = run([str(ROOT / "deploy" / "image" / "local-base.sh")], timeout=900, env=env)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]


def build_context(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """What the Dockerfile copies (as .dockerignore lets it in), the Dockerfile, and ``extra``."""
    from tests.support.packaging import dockerfile_sources

    dest.mkdir(parents=True)
    for source in [*dockerfile_sources(), "Dockerfile", ".dockerignore", *extra]:
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, dest / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, dest / source)
    return dest
