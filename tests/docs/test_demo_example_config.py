"""The example server's own-issuer-and-provider steps, run as its README writes them: the test OAuth
server, `make run` with `examples/mcp_server/elicitd.toml`, the example server, a user token, and
the SDK client snippet whose `webbrowser.open` a real (headless) browser answers. And a mistake in
that file stops `make run` with one line, not a traceback.

Only addresses change: the README's fixed ports become free ones, `make run` becomes the command it
runs (`elicitd dev`) on a free port and a fresh data directory."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.apps import free_port
from tests.support.dev_instance import dev_instance, run_dev, stop
from tests.support.docs import ROOT, code_block, read, section
from tests.support.oauth_server import OAuthServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

README = "examples/mcp_server/README.md"
CONFIG = "examples/mcp_server/elicitd.toml"


def steps(block: str) -> dict[int, str]:
    """The numbered steps of a shell block (``# 1. …`` starts step 1), continuation lines joined."""
    found: dict[int, list[str]] = {}
    current = 0
    for line in block.replace("\\\n", " ").splitlines():
        numbered = re.match(r"# (\d+)\. ", line)
        if numbered:
            current = int(numbered.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            found.setdefault(current, []).append(line)
    return {number: "\n".join(lines) for number, lines in found.items()}


def assignments(command: str, program: str) -> dict[str, str]:
    """``A=1 B=2 program`` → ``{"A": "1", "B": "2"}``, checking the command is exactly that."""
    before, _, after = command.partition(program)
    assert not after.strip(), command
    return dict(word.split("=", 1) for word in before.split())


def wait_for_port(port: int, *, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the example server exited with {process.returncode}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def test_the_readme_shows_the_config_file_as_it_is() -> None:
    shown = code_block(section(read(README), "Run it against your own issuer and provider"), "toml")
    assert tomllib.loads(shown) == tomllib.loads(read(CONFIG))


def test_a_mistake_in_the_config_file_stops_make_run_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / ".data"
    log = tmp_path / "dev.log"
    # elicitd.toml as shipped, started without the variable that holds the provider's secret.
    process = run_dev(data_dir, free_port(), log, {"ELICITD_CONFIG_FILE": CONFIG})
    try:
        assert process.wait(180) != 0
    finally:
        stop(process, data_dir)
    output = log.read_text()
    said = [line for line in output.splitlines() if line.startswith("elicitd:")]
    expected = (
        f"elicitd: ELICITD_CONFIG_FILE {CONFIG}: provider 'files': environment variable EXAMPLE_FILES_SECRET is not set"
    )
    assert said == [expected]
    assert "Traceback" not in output
    assert "elicitd is serving" not in output
    # The README quotes that very line.
    assert expected in " ".join(read(README).replace("`", "").split())


def test_the_example_config_runs_as_the_readme_shows(tmp_path: Path) -> None:
    part = section(read(README), "Run it against your own issuer and provider")
    shell = steps(code_block(part, "sh"))
    assert sorted(shell) == [1, 2, 3, 4]
    assert shell[1] == "node tests/support/oauth-server/server.js 9100 &"
    with OAuthServer() as oauth:  # step 1: that server, on a free port
        oauth_port = str(urlsplit(oauth.base_url).port)
        example_port = str(free_port())
        data_dir = tmp_path / ".data"

        def moved(text: str, elicitd_port: int) -> str:
            return (
                text.replace("9100", oauth_port)
                .replace("9000", example_port)
                .replace("127.0.0.1:8000", f"127.0.0.1:{elicitd_port}")
                .replace("$(cat .data/", f"$(cat {data_dir}/")
                .replace(".venv/bin/python", sys.executable)
            )

        # Step 2: `make run` with the config file and the variable it names.
        env = assignments(shell[2], "make run")
        config = tmp_path / "elicitd.toml"
        config.write_text(read(env["ELICITD_CONFIG_FILE"]).replace("9100", oauth_port))
        env["ELICITD_CONFIG_FILE"] = str(config)
        with dev_instance(data_dir, env=env) as instance:
            assert "elicitd is serving" in instance.output()
            # Step 3: the example server.
            server_log = (tmp_path / "example-server.log").open("wb")
            server = subprocess.Popen(
                # bash runs a lone command in its own place, so terminate() reaches the server.
                ["bash", "-c", moved(shell[3], instance.port).replace("\n", " ")],
                cwd=ROOT,
                stdout=server_log,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_for_port(int(example_port), process=server)
                # Step 4: the user's token.
                minted = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", moved(shell[4], instance.port) + '\nprintf %s "$TOKEN"'],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert minted.returncode == 0, minted.stderr
                token = minted.stdout.strip()
                assert token.count(".") == 2
                # The SDK client, as written; `webbrowser.open` runs the headless person.
                client = tmp_path / "client.py"
                client.write_text(moved(code_block(part, "python"), instance.port))
                browser = tmp_path / "browser.sh"
                browser.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.docs.example_person "$1"\n')
                browser.chmod(0o755)
                answer = subprocess.run(
                    [sys.executable, str(client)],
                    cwd=ROOT,
                    env={**os.environ, "TOKEN": token, "BROWSER": str(browser), "EXAMPLE_PERSON": "alice"},
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
            finally:
                server.terminate()
                server.wait(10)
                server_log.close()
        server_said = (tmp_path / "example-server.log").read_text(errors="replace")
        assert answer.returncode == 0, answer.stdout + answer.stderr + "\nexample server:\n" + server_said
        lines = answer.stdout.splitlines()
        assert lines[0].startswith(f"Opening {instance.url}/f/fl_")
        assert "browser: Connected" in lines
        assert lines[-1] == "2 files: notes.txt, report.pdf"
