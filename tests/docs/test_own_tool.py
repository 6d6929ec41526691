"""The second ten minutes: a tool of one's own against ``make run``, as docs/mcp.md tells it.

The commands are taken from the page's shell blocks, not retyped; only the addresses move (the
instance runs on a free port with its own data directory) and ``BROWSER=true`` keeps the client
from launching a desktop browser, because headless Chromium plays the person instead."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.demo.person import HeadlessPerson
from tests.support.apps import free_port
from tests.support.dev_instance import DevInstance, dev_instance
from tests.support.docs import ROOT, code_blocks, read, section

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ANSWER = "my_files: 3 files: welcome.md, meeting-notes.txt, alice-budget.xlsx"


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevInstance]:
    with dev_instance(tmp_path_factory.mktemp("fresh-clone") / ".data") as running:
        yield running


def moved(command: str, instance: DevInstance, port: int) -> str:
    """The documented command aimed at ``instance`` and an MCP server on ``port``."""
    return (
        command.replace("http://127.0.0.1:8000", instance.url)
        .replace("127.0.0.1:9000", f"127.0.0.1:{port}")
        .replace(".data/", f"{instance.data_dir}/")
        .replace(".venv/bin/python", sys.executable)
    )


@contextlib.contextmanager
def background(script: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def wait_for_line(process: subprocess.Popen[str], starts: str, seen: list[str]) -> str:
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, f"ended before printing {starts!r}:\n" + "".join(seen)
        seen.append(line)
        if line.strip().startswith(starts):
            return line.strip()


def test_the_page_shows_the_example_server_as_it_is() -> None:
    page = section(read("docs/mcp.md"), "Your own tool in ten minutes")
    assert (ROOT / "examples/own_tool/server.py").read_text() in code_blocks(page, "python")
    assert code_blocks(page, "text") == [ANSWER + "\n"]


async def test_your_own_python_tool_as_docs_mcp_md_tells_it(instance: DevInstance, tmp_path: Path) -> None:
    run, serve, call = code_blocks(section(read("docs/mcp.md"), "Your own tool in ten minutes"), "sh")
    assert run.strip() == "make run"  # the instance: `elicitd dev`, what `make run` runs
    port = free_port()
    env = {
        **os.environ,
        "ELICITD_URL": instance.url,
        "PORT": str(port),
        "BROWSER": "true",  # webbrowser.open runs `true URL`: the person here is headless Chromium
        "PYTHONWARNINGS": "default",  # every warning printed, none hidden by a filter
    }
    server_log = tmp_path / "server.log"
    with background(moved(serve, instance, port), env, server_log) as server:
        client = subprocess.Popen(
            [
                "bash",
                "-euo",
                "pipefail",
                "-c",
                f"for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/{port}) "
                f"2>/dev/null && break; sleep 0.1; done\n{moved(call, instance, port)}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: list[str] = []
        try:
            link = wait_for_line(client, f"{instance.url}/f/fl_", seen)
            async with HeadlessPerson("alice") as person:
                said = await person.connect(link)
            assert said == "Connected. Your Demo Files account alice is now connected for Development MCP server."
            rest, _ = client.communicate(timeout=60)
        finally:
            if client.poll() is None:
                client.kill()
        output = "".join(seen) + rest
        assert client.returncode == 0, output
        assert output.splitlines()[-1] == ANSWER
        assert "Connect your Demo Files account to continue." in output

        # Again: connected, so the answer comes without a link.
        again = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", moved(call, instance, port)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (again.returncode, again.stdout.splitlines()) == (0, [ANSWER]), again.stderr
        assert server.poll() is None
    started = server_log.read_text()
    assert "Uvicorn running on" in started
    assert "Warning" not in started, started  # MCPDeprecationWarning and any other


def test_the_typescript_page_shows_the_example_server_as_it_is() -> None:
    page = section(read("docs/typescript.md"), "Your own tool in ten minutes")
    assert code_blocks(page, "ts") == [(ROOT / "examples/own_tool/typescript/server.ts").read_text()]
    assert code_blocks(page, "text") == [ANSWER + "\n"]


async def test_your_own_typescript_tool_as_docs_typescript_md_tells_it(instance: DevInstance, tmp_path: Path) -> None:
    """``make typescript`` packs the package; a project of one's own installs the tarball, builds
    the example with strict TypeScript and serves it; Dev ID's ES256 tokens pass its verifier."""
    serve, call = code_blocks(section(read("docs/typescript.md"), "Your own tool in ten minutes"), "sh")
    project = tmp_path / "my-tool"
    port = free_port()
    env = {**os.environ, "ELICITD_URL": instance.url, "PORT": str(port), "BROWSER": "true", "NO_COLOR": "1"}
    script = moved(serve.replace('"$ELICITD_CLONE/.data/', '"@DATA@/'), instance, port)
    script = script.replace("@DATA@", str(instance.data_dir)).replace("../my-tool", str(project))
    server_log = tmp_path / "server.log"
    with background(script, env, server_log) as server:
        client = subprocess.Popen(
            [
                "bash",
                "-euo",
                "pipefail",
                "-c",
                f"for i in $(seq 1200); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done\n"
                + moved(call, instance, port).replace('"sub": "alice"', '"sub": "bob"'),  # alice is connected
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: list[str] = []
        try:
            try:
                link = wait_for_line(client, f"{instance.url}/f/fl_", seen)
            except AssertionError as e:
                raise AssertionError(str(e) + server_log.read_text()) from None
            async with HeadlessPerson("bob") as person:
                said = await person.connect(link)
            assert said == "Connected. Your Demo Files account bob is now connected for Development MCP server."
            rest, _ = client.communicate(timeout=60)
        finally:
            if client.poll() is None:
                client.kill()
        output = "".join(seen) + rest
        assert client.returncode == 0, output + server_log.read_text()
        assert output.splitlines()[-1] == ANSWER.replace("alice", "bob")
        assert server.poll() is None, server_log.read_text()
    served = server_log.read_text()
    assert f"my-files MCP server on http://127.0.0.1:{port}/mcp" in served, served
    assert '"@elicitd/client": "file:' in (project / "package.json").read_text()
    assert (project / "node_modules/@elicitd/client/build/src/auth.js").is_file()
    assert "warn" not in served.lower(), served
