"""A mixed fleet on real PostgreSQL: during a rollout the previous release's replicas and this
release's serve one database on which this release's migration has already run. For every
migration docs/deploy.md marks safe, both releases — taken from git: the commit that added the
migration and its parent — serve together on the schema it made: each reads the flows the other
creates, both are ready, neither logs an error. The newest migration is paired with the working
tree's code, the release being rolled out now.

Each release runs from its own source tree on this test's interpreter and packages (the pins
change little between neighbouring releases); the migration chain goes where the wheel puts it
(``service/migrations``). Needs the repository's history (not a shallow clone).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from service.db.migrate import upgrade_async
from service.health import known_revisions
from service.settings import KeyRing, normalize_database_url
from tests.support import backends
from tests.support.apps import free_port
from tests.support.packaging import ROOT

DOCS = ROOT / "docs" / "deploy.md"


def marked() -> dict[str, str]:
    """Revision → its verdict in docs/deploy.md's table (``safe``, ``not safe``, ``—``)."""
    rows = re.findall(r"^\| (\d{4})[^|]*\| \**([^|*]+?)\** \|", DOCS.read_text(), re.MULTILINE)
    return dict(rows)


# How many commits on each side of a migration are tried for a release that starts: a change made
# over several commits leaves some that do not (after 0018's, the first ten fail at import). A
# commit that does not start ends in a second or two, so trying more costs little.
SEARCHED = 40
SAFE = sorted(revision for revision, verdict in marked().items() if verdict == "safe")


def test_every_migration_has_a_verdict() -> None:
    _, known = known_revisions()
    assert set(marked()) == known
    assert set(marked().values()) <= {"safe", "not safe", "—"}
    assert SAFE and "0012" not in SAFE


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _introduced(revision: str) -> str:
    """The commit that added ``revision``'s script, wherever the chain lived then — or, when its
    predecessor's script landed after it (two migrations written side by side), the first commit
    that holds both: before it the chain did not reach ``revision``."""
    patterns = [f"service/migrations/versions/{revision}_*.py", f"migrations/versions/{revision}_*.py"]
    commits = _git("log", "--diff-filter=A", "--format=%H", "--", *patterns).split()
    assert commits, f"no commit adds migration {revision} (a shallow clone?)"
    before = _served_before(revision)
    if _has(commits[-1], before):
        return commits[-1]
    for commit in _git("rev-list", "--first-parent", "--reverse", f"{commits[-1]}..HEAD").split():
        if _has(commit, before):
            return commit
    return commits[-1]


def _served_before(revision: str) -> str:
    """The newest migration below ``revision`` that some release served without it: migrations
    marked ``—`` were released together with the next one, so the previous release had neither."""
    verdicts = marked()
    before = f"{int(revision) - 1:04d}"
    while verdicts.get(before) == "—":
        before = f"{int(before) - 1:04d}"
    # The first release's migrations are all ``—`` too; below them no release served anything.
    return before if before in verdicts else f"{int(revision) - 1:04d}"


def _has(commit: str, revision: str) -> bool:
    names = _git("ls-tree", "-r", "--name-only", commit, "service/migrations", "migrations").split()
    return any(Path(name).name.startswith(f"{revision}_") for name in names)


def _previous_releases(introduced: str, revision: str) -> list[str]:
    """The commits before ``introduced`` that hold the chain one short of ``revision``, newest
    first: the previous release is the newest of them whose code starts (a commit may hold half
    of a change that its successor completed)."""
    before = _served_before(revision)
    found = []
    for commit in _git("rev-list", "--first-parent", f"--max-count={SEARCHED}", f"{introduced}^").split():
        if not _has(commit, before):
            break
        found.append(commit)
    return found


def _releases_of(introduced: str, revision: str) -> list[str]:
    """``introduced`` and the commits after it whose chain still ends at ``revision``, oldest first:
    this release is the first of them whose code starts."""
    after = f"{int(revision) + 1:04d}"
    found = []
    for commit in _git("rev-list", "--first-parent", "--reverse", f"{introduced}^..HEAD").split()[:SEARCHED]:
        if _has(commit, after):
            break
        found.append(commit)
    return found


async def _first_that_starts(commits: list[str], env: dict[str, str], dest: Path) -> Replica:
    for commit in commits:
        replica = Replica(await asyncio.to_thread(_tree, commit, dest / commit[:12]), env, free_port())
        if await _ready(replica):
            return replica
        replica.stop()  # a commit that does not start is no release
    pytest.fail(f"none of the commits {[c[:12] for c in commits]} starts")


def _tree(commit: str, dest: Path) -> Path:
    """The release's sources as an installed wheel lays them out."""
    top = set(_git("ls-tree", "--name-only", commit).split())
    paths = [p for p in ("service", "migrations", "elicitd_client") if p in top]
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, *paths], cwd=ROOT, capture_output=True, timeout=60, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    if (dest / "migrations").is_dir():
        shutil.move(dest / "migrations", dest / "service" / "migrations")
    return dest


class Replica:
    def __init__(self, source: Path, env: dict[str, str], port: int) -> None:
        self.source, self.port = source, port
        self.env = env | {"PYTHONPATH": str(source), "ELICITD_PUBLIC_URL": f"http://127.0.0.1:{port}"}
        self.process: subprocess.Popen[str] | None = None

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            cwd=self.source,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.source,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> str:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stderr is not None
        return self.process.stderr.read()


async def _ready(replica: Replica) -> bool:
    """Start ``replica`` and wait for /readyz 200; False when its process ends first."""
    replica.start()
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{replica.port}", timeout=10) as http:
        while True:
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            assert replica.process is not None
            if replica.process.poll() is not None:
                return False
            assert time.monotonic() < deadline, f"{replica.source} did not become ready"
            await asyncio.sleep(0.2)


@asynccontextmanager
async def _clients(replicas: list[Replica]) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{r.port}", timeout=30) for r in replicas]
    try:
        yield clients
    finally:
        for http in clients:
            await http.aclose()


def _errors(log: str) -> list[str]:
    """Log lines at error level or above, and tracebacks."""
    found = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            if "Traceback" in line:
                found.append(line)
            continue
        if isinstance(record, dict) and record.get("level") in {"error", "critical"}:
            found.append(line[:500])
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("revision", SAFE)
async def test_the_previous_release_serves_beside_this_one_after_the_migration(
    revision: str, backend: backends.Backends, tmp_path: Path
) -> None:
    head, _ = known_revisions()
    introduced = _introduced(revision)
    previous = _previous_releases(introduced, revision)
    assert previous, f"no commit before {introduced[:12]} holds the chain up to the migration before {revision}"
    url = await backends.create_database(backend.server_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELICITD_", "PYTHON"))} | {
        "ELICITD_DATABASE_URL": url,
        "ELICITD_REDIS_URL": backend.redis_url,
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        "ELICITD_REDIS_CHANNEL": f"elicitd:fleet:{revision}:{free_port()}",
    }
    started: list[Replica] = []
    try:
        # The rollout's first step: this release's migration, while the previous release serves.
        await upgrade_async(normalize_database_url(url), revision)
        if revision == head:
            new = Replica(ROOT, env, free_port())
            assert await _ready(new), new.stop()[-3000:]
        else:
            new = await _first_that_starts(_releases_of(introduced, revision), env, tmp_path / "current")
        started.append(new)
        old = await _first_that_starts(previous, env, tmp_path / "previous")
        started.append(old)
        created = await asyncio.to_thread(
            new.command, "servers", "create", "fleet", "--subject-proof", "none", "--json"
        )
        if created.returncode == 2:  # a release from before subject proof
            created = await asyncio.to_thread(new.command, "servers", "create", "fleet", "--json")
        assert created.returncode == 0, created.stderr
        auth = {"Authorization": f"Bearer {json.loads(created.stdout)['api_key']}"}
        async with _clients([old, new]) as (http_old, http_new):
            for maker, reader in ((http_old, http_new), (http_new, http_old)):
                made = await maker.post(
                    "/v1/flows",
                    headers=auth,
                    json={
                        "subject": {"iss": "https://id.example.com", "sub": "fleet"},
                        "kind": "external",
                        "url": "https://app.example.com/step",
                    },
                )
                assert made.status_code in {200, 201}, made.text  # releases before 0010 answered 200
                flow = made.json()["flow"]["id"]
                read = await reader.get(f"/v1/flows/{flow}", headers=auth)
                assert (read.status_code, read.json()["flow"]["id"], read.json()["flow"]["status"]) == (
                    200,
                    flow,
                    "pending",
                ), read.text
            ready = await http_new.get("/readyz")
            assert ready.status_code == 200 and (await http_old.get("/readyz")).status_code == 200
            if "schema" in ready.json():
                assert ready.json()["schema"] == "current"
    finally:
        logs = {name: replica.stop() for name, replica in zip(("current", "previous"), started, strict=False)}
        await backends.drop_database(backend.server_url, url)
    assert {name: _errors(log) for name, log in logs.items()} == {"current": [], "previous": []}
