"""The compose first start ends with a working server client, issuer and provider: the lines that
head compose.yaml (and docs/operating.md shows) are run here, each ``elicitd …`` part against the
test database, as ``docker compose exec elicitd`` would run it in the container.

Only what cannot work here is changed: the issuer, the client and the provider get names of their
own (the database is shared with other tests; the provider keeps the catalog entry its name picked),
and discovery is not asked of example.com."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable

import yaml
from sqlalchemy import text

from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp
from tests.support.docs import ROOT, code_block, read, section

EXEC = re.compile(r"^docker compose exec (?:-T )?elicitd (elicitd .*)$")


def header_steps() -> list[str]:
    header = (ROOT / "compose.yaml").read_text().split("services:")[0]
    return [line.removeprefix("#").strip() for line in header.splitlines() if line.startswith("#   ")]


def test_compose_yaml_and_operating_md_show_the_same_first_start() -> None:
    documented = code_block(section(read("docs/operating.md"), "With Docker Compose"), "sh").splitlines()
    assert header_steps() == documented
    execs = [EXEC.match(line) for line in documented if line.startswith("docker compose exec")]
    assert [match.group(1).split()[1:3] for match in execs if match] == [
        ["issuers", "add"],
        ["providers", "add"],
        ["servers", "create"],
        ["admin", "tokens"],
    ]
    # The secret the issuer step names reaches the container from .env, as the step before says.
    environment = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["elicitd"]["environment"]
    assert environment["ELICITD_ISSUER_CLIENT_SECRET"] == "${ELICITD_ISSUER_CLIENT_SECRET:-}"
    assert 'echo "ELICITD_ISSUER_CLIENT_SECRET=' in "\n".join(documented)


async def test_the_first_start_ends_with_a_client_issuer_and_provider_that_work(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    suffix = uuid.uuid4().hex[:6]
    issuer, client, provider = f"https://id-{suffix}.example.com", f"my-mcp-server-{suffix}", f"github-{suffix}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": settings.database_url,
            "ELICITD_REDIS_URL": settings.redis_url or "",
            "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
            "ELICITD_KEYS": KeyRing.generate_entry("c1"),
            "ELICITD_ISSUER_CLIENT_SECRET": "issuer-client-secret",
        }
    )
    printed: dict[str, str] = {}
    for step in header_steps():
        found = EXEC.match(step)
        if found is None:
            continue  # build, keys, .env, up: the container's part, not elicitd's
        command, _, stdin_file = found.group(1).partition(" < ")
        command = command.replace("https://id.example.com", issuer).replace("my-mcp-server", client)
        command = command.replace("providers add github", f"providers add {provider} --catalog github").replace(
            "--provider github", f"--provider {provider}"
        )
        if " add " in command:
            command += " --no-discover"
        words = shlex.split(command)
        ran = subprocess.run(
            [sys.executable, "-m", "service.cli", *words[1:]],
            input="provider-client-secret\n" if stdin_file else None,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, f"{command}: {ran.stderr}"
        printed[" ".join(words[1:3])] = ran.stdout
    assert (
        "subject proof: required (users' tokens must be for https://mcp.example.com/mcp)"
        in printed["servers create"].splitlines()
    )
    assert re.search(r"^API key \(shown once, store it now\): elk_", printed["servers create"], re.M)
    assert "redirect URI to register there: https://elicitd.example.com/connect/callback" in printed["providers add"]
    async with elicitd.state.sessions() as session:
        saved_issuer = (
            await session.execute(
                text("SELECT client_id, client_secret_enc IS NOT NULL, enabled FROM issuers WHERE issuer = :i"),
                {"i": issuer},
            )
        ).one()
        saved_provider = (
            await session.execute(
                text("SELECT client_id, client_secret_enc IS NOT NULL, enabled FROM providers WHERE name = :n"),
                {"n": provider},
            )
        ).one()
        saved_client = (
            await session.execute(
                text(
                    "SELECT trusted_issuers, allowed_providers, resource_uris, subject_proof FROM server_clients "
                    "WHERE name = :n"
                ),
                {"n": client},
            )
        ).one()
    assert tuple(saved_issuer) == ("elicitd-login", True, True)
    assert tuple(saved_provider) == ("Iv1.example", True, True)
    assert (list(saved_client[0]), list(saved_client[1]), list(saved_client[2]), saved_client[3]) == (
        [issuer],
        [provider],
        ["https://mcp.example.com/mcp"],
        "required",
    )
    assert json.dumps(printed).count("issuer-client-secret") == 0
