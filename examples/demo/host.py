"""An MCP host, the example MCP server, and one tool call that needs the user's Demo Files account.

What happens, in the order a real deployment does it:

1. The host gets its user's access token for the MCP server. A real host runs the MCP
   authorization flow at the user's identity provider; here Dev ID mints the token (``/mint``).
2. The host calls ``list_files`` on the example server. The server asks elicitd for the user's
   Demo Files token; elicitd has none, so the tool answers ``input_required`` with a URL.
3. The host shows the URL (here: prints it, or hands it to headless Chromium). In the browser the
   person signs in at Dev ID (elicitd checks it is the same user the token named), presses
   *Continue*, and allows access at Demo Files.
4. Meanwhile the host retries the call; elicitd answers once the account is connected, the tool
   calls Demo Files' files API with the user's token, and the host prints the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, TextContent

from elicitd_client import ElicitdClient
from elicitd_client.mcp import Elicitd
from examples.demo.person import HeadlessPerson
from examples.mcp_server.server import ExampleConfig, build_server

PROVIDER = "demo-files"
SCOPES = ("files:read",)
# A person needs longer than the ~60 s a host usually gives a tool call: ten minutes, in rounds of
# at most 15 s each (every round is a normal retry with the same arguments).
PATIENCE_SECONDS = 600.0
MAX_ROUNDS = 100


class DemoError(RuntimeError):
    """Something the person can fix; the message says what."""


@dataclass
class Options:
    elicitd_url: str
    api_key: str
    user: str = "alice"
    headless: bool = False
    screenshots: Path | None = None


@dataclass
class Transcript:
    """What the host prints, kept for the last screenshot."""

    lines: list[str] = field(default_factory=list)
    out: Callable[[str], None] = print

    def say(self, text: str = "") -> None:
        for line in text.split("\n"):
            self.lines.append(line)
            self.out(line)


def dev_api_key(data_dir: Path) -> str:
    path = data_dir / "dev-api-key"
    if not path.exists():
        raise DemoError(f"no {path}: start elicitd with `make run` first (in another terminal), then `make demo`.")
    return path.read_text().strip()


class _QuietServer(uvicorn.Server):
    """The example server inside the demo's process: Ctrl+C belongs to the demo, not to it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def check_elicitd(url: str) -> str:
    """elicitd's Dev ID issuer URL, or a DemoError saying why the instance cannot run the demo."""
    issuer = f"{url}/dev/id"
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            await http.get(f"{url}/healthz")
        except httpx.HTTPError:
            raise DemoError(
                f"elicitd does not answer at {url}: start it with `make run` (in another terminal)."
            ) from None
        found = await http.get(f"{issuer}/.well-known/openid-configuration")
    if found.status_code != 200:
        raise DemoError(
            f"elicitd at {url} serves no Dev ID: the demo needs `make run` on its embedded database, on loopback."
        )
    return issuer


@contextlib.asynccontextmanager
async def example_server(options: Options, issuer: str) -> AsyncIterator[str]:
    """The example MCP server (examples/mcp_server) on a free loopback port; yields its MCP URL."""
    port = _free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    config = ExampleConfig(
        issuer=issuer,
        audience=resource,
        resource_url=resource,
        provider=PROVIDER,
        scopes=SCOPES,
        files_url=f"{options.elicitd_url}/dev/files/api/files",
        name="files-assistant",
    )
    client = ElicitdClient(options.elicitd_url, options.api_key)
    helper = Elicitd(client, budget_seconds=PATIENCE_SECONDS, max_rounds=MAX_ROUNDS)
    app = build_server(config, helper).streamable_http_app()
    server = _QuietServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise DemoError("the example MCP server did not start")
            await asyncio.sleep(0.02)
        yield resource
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 10)
        await client.aclose()


async def mint_user_token(issuer: str, user: str, audience: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{issuer}/mint", json={"sub": user, "audience": audience})
    answer.raise_for_status()
    token: str = answer.json()["access_token"]
    return token


async def run(options: Options, transcript: Transcript | None = None) -> str:
    """Run the demo; returns the tool's answer."""
    transcript = transcript or Transcript()
    say = transcript.say
    issuer = await check_elicitd(options.elicitd_url)
    person = HeadlessPerson(options.user, options.screenshots) if options.headless else None
    shown: list[str] = []
    browsing: list[asyncio.Task[str]] = []

    async def show_url(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if not isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action="decline")  # this host only knows URL mode
        if params.url in shown:
            return ElicitResult(action="accept")  # the same link again: the person is on it already
        shown.append(params.url)
        say(f"\nThe tool asks: {params.message}")
        say(f"Open this link in your browser (it is on {urlsplit(params.url).netloc}):\n\n    {params.url}\n")
        if person is None:
            say(f'Sign in as "{options.user}", choose "Continue to Demo Files", then "Allow".')
            say(f"Waiting for you (up to {int(PATIENCE_SECONDS / 60)} minutes; Ctrl+C stops)...")
        else:
            say(f'HEADLESS=1: Chromium opens it, signs in as "{options.user}", continues and allows.')
            browsing.append(asyncio.create_task(person.connect(params.url)))
        return ElicitResult(action="accept")

    async with contextlib.AsyncExitStack() as stack:
        if person is not None:
            await stack.enter_async_context(person)
        resource = await stack.enter_async_context(example_server(options, issuer))
        token = await mint_user_token(issuer, options.user, resource)
        say(f"MCP host: connected to the example MCP server at {resource} as {options.user} (a Dev ID token).")
        say("MCP host: calling the tool list_files, which needs your Demo Files account...")
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            client = Client(
                streamable_http_client(resource, http_client=http),
                elicitation_callback=show_url,
                input_required_max_rounds=MAX_ROUNDS,
            )
            async with client:
                result = await client.call_tool("list_files", {})
        if browsing:
            say(f"Browser: {await browsing[0]}")
        block = result.content[0] if result.content else None
        answer = block.text if isinstance(block, TextContent) else repr(result.content)
        if result.is_error:
            raise DemoError(f"the tool failed: {answer}")
        if not shown:
            say(f"(Demo Files was already connected for {options.user}, so nobody was asked.)")
        say(f"\nTool answer: {answer}")
        if person is not None:
            await person.show_transcript(transcript.lines)
    return answer


def data_dir() -> Path:
    return Path(os.environ.get("ELICITD_DATA_DIR", ".data"))
