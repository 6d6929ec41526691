"""compose.yaml, the Dockerfile and .dockerignore: production mode, a migration job, health checks,
and a build context holding only the package sources. Docker Compose itself validates the file
where it is installed (CI installs it); elsewhere that step says so in a warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import yaml

from tests.support.packaging import dockerfile_sources

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def _compose_cli() -> list[str] | None:
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=30, check=False)
        if probe.returncode == 0:
            return command
    return None


def test_compose_runs_elicitd_in_production_mode_after_a_migration_job() -> None:
    services = _compose()["services"]
    migrate, elicitd = services["migrate"], services["elicitd"]
    assert migrate["command"] == ["elicitd", "migrate"] and migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert elicitd["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert elicitd["environment"]["ELICITD_DEV"] == "false"
    assert elicitd["environment"] == migrate["environment"]
    for name in ("postgres", "redis", "elicitd"):
        assert services[name]["healthcheck"]["test"], name
    assert "/readyz" in " ".join(elicitd["healthcheck"]["test"])
    # How to get the first API key is written where people look first.
    header = (ROOT / "compose.yaml").read_text().split("services:")[0]
    assert "docker compose exec elicitd elicitd servers create" in header
    assert "elicitd keys generate" in header


def test_docker_compose_accepts_the_file() -> None:
    cli = _compose_cli()
    if cli is None:
        message = (
            "Docker Compose is not installed (neither `docker compose` nor `docker-compose`), so compose.yaml "
            "was checked only by the structural test (Debian: apt-get install docker-compose)"
        )
        assert not os.environ.get("CI"), message + "; CI must run this check (.ci/run installs it)"
        warnings.warn(message, stacklevel=1)
        return
    env = {**os.environ, "ELICITD_KEYS": "k1:" + "A" * 43}
    result = subprocess.run(
        [*cli, "-f", str(ROOT / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]["elicitd"]["environment"]
    assert (resolved["ELICITD_DEV"], resolved["ELICITD_KEYS"]) == ("false", "k1:" + "A" * 43)


def test_the_build_context_holds_only_what_the_dockerfile_copies() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"  # everything is left out unless named
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == set(dockerfile_sources())
    assert {"**/__pycache__", "**/*.pyc"} <= set(lines)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "migrations" in dockerfile_sources()  # the wheel carries them as service.migrations
    assert '"${wheel}[server]"' in dockerfile and "-c /tmp/constraints.txt" in dockerfile
