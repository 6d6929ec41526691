"""The first ten minutes, as the README tells them: `make run`, the quick start against it, then
`make demo` — an MCP host whose tool needs the user's Demo Files account — until the account is
connected and the tool's answer appears.

`make run` is `elicitd dev`; it runs here as a subprocess on a free port with a fresh data
directory (embedded PostgreSQL and Redis, nothing configured). `make demo` runs through make, as a
person types it, pointed at that instance."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from examples.demo.person import SHOTS, HeadlessPerson
from tests.docs.test_readme import json_documents
from tests.observability.test_metrics import samples, value
from tests.support.dev_instance import DevInstance, dev_instance
from tests.support.docs import ROOT, code_block, read, section
from tests.support.waiting import until

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VENV = Path(sys.executable).parent.parent
ANSWER = "Tool answer: 3 files: welcome.md, meeting-notes.txt, {user}-budget.xlsx"


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevInstance]:
    assert shutil.which("make"), "the README's commands need make"
    with dev_instance(tmp_path_factory.mktemp("fresh-clone") / ".data") as running:
        yield running


def make(target: str, instance: DevInstance, *variables: str) -> list[str]:
    """``make <target> VAR=…`` at the repository root against ``instance``, with this test run's
    virtualenv (``-o`` keeps make from reinstalling it)."""
    return ["make", "-s", "-o", f"{VENV}/.installed", target, f"VENV={VENV}", *variables]


def demo_env(instance: DevInstance) -> dict[str, str]:
    return {**os.environ, "ELICITD_URL": instance.url, "ELICITD_DATA_DIR": str(instance.data_dir)}


async def resolves(instance: DevInstance) -> float:
    """How many MCP retries (``POST /v1/flows/resolve``) the instance has answered so far."""
    async with httpx.AsyncClient(timeout=10) as http:
        found = samples((await http.get(f"{instance.url}/metrics")).text)
    return value(found, "elicitd_http_requests_total", method="POST", route="/v1/flows/resolve", status="200")


def test_make_run_prints_how_to_try_dev_id_and_demo_files(instance: DevInstance) -> None:
    banner = instance.output()
    assert f"elicitd is serving at {instance.url}" in banner
    assert f"Dev ID:               {instance.dev_issuer}" in banner
    assert "make demo" in banner
    assert '"provider": "demo-files"' in banner
    assert "Traceback" not in banner


async def test_the_quick_start_then_make_demo_headless_reach_a_connected_account(
    instance: DevInstance, tmp_path: Path
) -> None:
    # The README's quick start, as written, against the instance `make run` started.
    script = code_block(section(read("README.md"), "Try it"), "sh").replace(
        "localhost:8000", f"127.0.0.1:{instance.port}"
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    quick = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=instance.data_dir.parent,  # the script reads .data/dev-api-key, as from the repository root
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert quick.returncode == 0, quick.stderr
    created, completed, resolved = json_documents(quick.stdout)
    assert (created["status"], completed["flow"]["status"], resolved["outcome"]) == (
        "pending",
        "completed",
        "completed",
    )

    # make demo HEADLESS=1: the MCP host, the example server and Chromium as the person.
    shots = tmp_path / "screenshots"
    demo = subprocess.run(
        make("demo", instance, "HEADLESS=1", f"SCREENSHOTS={shots}"),
        cwd=ROOT,
        env=demo_env(instance),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    lines = demo.stdout.splitlines()
    links = [line.strip() for line in lines if line.strip().startswith(f"{instance.url}/f/fl_")]
    assert len(links) == 1, demo.stdout
    assert "Browser: Connected. Your Demo Files account alice is now connected for Development MCP server." in lines
    assert ANSWER.format(user="alice") in lines
    assert sorted(p.name for p in shots.iterdir()) == sorted(SHOTS.values())
    assert all(p.read_bytes().startswith(b"\x89PNG") and p.stat().st_size > 10_000 for p in shots.iterdir())

    # The account is connected in elicitd: the dev server client gets alice's Demo Files token.
    async with httpx.AsyncClient(timeout=10, headers={"Authorization": f"Bearer {instance.api_key}"}) as http:
        token = await http.get(
            f"{instance.url}/v1/connections/demo-files/token", params={"iss": instance.dev_issuer, "sub": "alice"}
        )
        assert token.status_code == 200
        assert (token.json()["account_login"], token.json()["account_id"]) == ("alice", "df-alice")
        files = await http.get(
            f"{instance.url}/dev/files/api/files", headers={"Authorization": f"Bearer {token.json()['access_token']}"}
        )
        assert files.json()["files"][2]["name"] == "alice-budget.xlsx"

    # Again: the connection stands, so the tool answers without asking anybody.
    again = subprocess.run(
        make("demo", instance),
        cwd=ROOT,
        env=demo_env(instance),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(Demo Files was already connected for alice, so nobody was asked.)" in again.stdout
    assert ANSWER.format(user="alice") in again.stdout.splitlines()
    assert "/f/fl_" not in again.stdout


async def test_make_demo_prints_the_link_and_waits_for_the_person(instance: DevInstance) -> None:
    answered = await resolves(instance)
    demo = await asyncio.create_subprocess_exec(
        *make("demo", instance, "DEMO_USER=dana"),
        cwd=ROOT,
        env=demo_env(instance),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert demo.stdout is not None
    seen: list[str] = []
    link = None
    try:
        while link is None:
            line = (await asyncio.wait_for(demo.stdout.readline(), 60)).decode()
            assert line, "make demo ended before printing a link:\n" + "".join(seen)
            seen.append(line)
            link = line.strip() if line.strip().startswith(f"{instance.url}/f/fl_") else None

        # A person takes a while to switch to the browser: longer than one of the host's retries.
        # The first retry waits its full round in elicitd and comes back still waiting for them.
        async def first_retry_answered() -> bool:
            await asyncio.sleep(0.2)  # a scrape runs a query: a few a second, not a hundred
            return await resolves(instance) > answered

        await until(first_retry_answered, timeout=60, what="the host's first retry")
        async with HeadlessPerson("dana") as person:
            said = await person.connect(link)
        assert said == "Connected. Your Demo Files account dana is now connected for Development MCP server."
        rest, _ = await asyncio.wait_for(demo.communicate(), 60)
    finally:
        if demo.returncode is None:
            demo.kill()
            await demo.wait()
    output = "".join(seen) + rest.decode()
    assert demo.returncode == 0, output
    assert 'Sign in as "dana", choose "Continue to Demo Files", then "Allow".' in output
    assert f"Open this link in your browser (it is on {urlsplit(instance.url).netloc}):" in output
    assert ANSWER.format(user="dana") in output.splitlines()
    assert len(re.findall(r"/f/fl_", output)) == 1  # shown once, however many retries it took
    assert await resolves(instance) >= answered + 2  # the person's account came with a later retry
