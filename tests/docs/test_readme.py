"""The README's quick start, run as written (bash, curl, python3) against a real instance."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.docs import code_block, read, section


def json_documents(output: str) -> list[Any]:
    """Every JSON document the commands printed (curl adds no newline, so they may touch)."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    index = 0
    while (start := output.find("{", index)) != -1:
        document, index = decoder.raw_decode(output, start)
        found.append(document)
    return found


async def test_the_quick_start_runs_as_written(
    elicitd: RunningApp, server_client: ServerClientHandle, tmp_path: Path
) -> None:
    missing = [tool for tool in ("bash", "curl") if shutil.which(tool) is None]
    assert not missing, f"the README's quick start needs {missing} on PATH"
    script = code_block(section(read("README.md"), "Try it"), "sh")
    assert "localhost:8000" in script
    script = script.replace("localhost:8000", urlsplit(elicitd.url).netloc)
    # `make run` keeps the dev server client's key here; this test's client stands in for it.
    (tmp_path / ".data").mkdir()
    (tmp_path / ".data" / "dev-api-key").write_text(server_client.api_key + "\n")
    # `python3` is the interpreter running the tests, as it is the one `make run` installed into.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        script,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    created, completed, resolved = json_documents(stdout.decode())
    assert created["status"] == "pending"
    assert created["mcp"]["resultType"] == "input_required"
    flow_id = created["flow"]["id"]
    assert completed["flow"]["id"] == flow_id
    assert completed["flow"]["status"] == "completed"
    assert resolved["outcome"] == "completed"
    assert resolved["flow"]["id"] == flow_id
    assert resolved["result"] == {"approved": True}
