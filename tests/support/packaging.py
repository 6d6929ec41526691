"""Build elicitd as a user or the Docker image would get it, and fresh virtualenvs to install it in.

``project_wheel()`` builds the wheel from a copy of exactly what the Dockerfile copies into the
image (its ``COPY`` sources), never from the working tree itself: a file the image lacks, or a
path that only exists in a source checkout, then fails here as it would in the image. The wheel is
built once per test process.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_sources(dockerfile: Path = ROOT / "Dockerfile") -> list[str]:
    """The build-context paths the Dockerfile's ``COPY`` instructions take (not ``--from`` stages)."""
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from") for word in words):
            sources += [word for word in words[1:-1] if not word.startswith("--")]
    return sources


@functools.cache
def project_wheel() -> Path:
    context = Path(tempfile.mkdtemp(prefix="elicitd-context-"))
    for source in dockerfile_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, context / source)
    out = Path(tempfile.mkdtemp(prefix="elicitd-wheel-"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(context)],
        check=True,
        timeout=300,
    )
    shutil.rmtree(context, ignore_errors=True)
    (wheel,) = out.glob("elicitd-*.whl")
    return wheel


def fresh_venv(path: Path) -> str:
    """A new virtualenv with pip and nothing else; returns its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return str(path / "bin" / "python")
