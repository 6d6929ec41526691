"""The running ``elicitd dev`` (``make run``): one per data directory, and how commands find it.

``elicitd dev`` holds an exclusive lock on ``<data dir>/dev.lock`` for as long as it runs. A second
``elicitd dev`` on the same directory stops at once with one line instead of sharing (or, when it
exits, stopping) the first one's embedded PostgreSQL and Redis. The kernel drops the lock when the
process ends, however it ends, so a crashed instance never leaves a stale lock behind.

While serving, it writes ``<data dir>/dev.env``: the ``ELICITD_*`` settings it runs with (database
and Redis URLs, keys, public URL), mode 0600. ``elicitd --dev COMMAND`` reads it, so every command
(``servers create``, ``admin …``, ``keys rotate``) talks to that instance without any setup; a shell
can load it too (``set -a; . .data/dev.env; set +a``). The file is removed on a clean stop, and
``--dev`` trusts it only while the lock is held, so a leftover file from a killed instance is never
used against a stopped database.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path

from service.cli_exits import AddressInUse, CommandFailed, ExitCode

LOCK_NAME = "dev.lock"
ENV_NAME = "dev.env"
# Where ``elicitd dev`` keeps its embedded servers, keys and these files; ``--dev`` looks there too.
DATA_DIR = Path(os.environ.get("ELICITD_DATA_DIR", ".data"))


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding the lock, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def hold(directory: Path, *, url: str) -> Iterator[None]:
    """Be the one ``elicitd dev`` of ``directory`` until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / LOCK_NAME
    fd = _try_lock(lock)
    if fd is None:
        holder = lock.read_text().strip() or "another process"
        raise AddressInUse(
            f"{directory}/ is in use by another elicitd dev ({holder}): stop it first, or set ELICITD_DATA_DIR "
            "to another directory"
        )
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, {url}".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            (directory / ENV_NAME).unlink()
        os.close(fd)


def write_env(directory: Path, settings: Mapping[str, str]) -> Path:
    """Write the instance's settings for ``--dev`` and shells (values quoted for ``sh``)."""
    path = directory / ENV_NAME
    lines = [
        "# The settings of the running `elicitd dev` (make run): `elicitd --dev COMMAND` reads this file.",
        "# Removed when it stops; do not edit.",
        *(f"{name}={shlex.quote(value)}" for name, value in sorted(settings.items())),
    ]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def is_running(directory: Path) -> bool:
    lock = directory / LOCK_NAME
    if not lock.exists():
        return False
    fd = _try_lock(lock)
    if fd is None:
        return True
    os.close(fd)
    return False


def read_env(directory: Path) -> dict[str, str]:
    """The running instance's settings; one clear line when there is none."""
    path = directory / ENV_NAME
    if not is_running(directory) or not path.exists():
        raise CommandFailed(
            f"--dev: no elicitd dev is running with {directory.resolve()}/ (start one with `make run`, "
            "or set ELICITD_DATA_DIR to its data directory)",
            ExitCode.CONFIGURATION,
        )
    settings: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            name, _, raw = line.partition("=")
            (value,) = shlex.split(raw) or [""]
            settings[name] = value
    return settings
