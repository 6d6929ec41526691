"""Dev ID and Demo Files (``service.devtools``) served for real on a loopback port, without elicitd
in front of them: tests talk to them over HTTP exactly as elicitd and the demo's MCP host do."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn

from service.devtools.keys import DevSecrets
from service.devtools.mount import DevTools
from tests.support.apps import free_port
from tests.support.serving import InProcessServer


@contextlib.asynccontextmanager
async def serving_dev_tools(data_dir: Path) -> AsyncIterator[DevTools]:
    """The dev tools of an instance whose public URL is ``http://127.0.0.1:<free port>``."""
    port = free_port()
    tools = DevTools.build(f"http://127.0.0.1:{port}", DevSecrets.load_or_create(data_dir))
    server = InProcessServer(
        uvicorn.Config(tools.app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    )
    task = await server.start()
    try:
        yield tools
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 10)


def request_id(page: httpx.Response) -> str:
    """The pending request a sign-in or consent page carries in its forms."""
    found = re.search(r'name="request" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)
