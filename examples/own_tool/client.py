"""An MCP client that declares URL-mode elicitation: it calls one tool and, when the tool needs
the person in a browser, prints the link (and opens it, unless ``--no-browser``).

    TOKEN=… python -m examples.own_tool.client http://127.0.0.1:9000/mcp my_files
"""

import argparse
import os
import webbrowser
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, TextContent


async def main(url: str, tool: str, open_browser: bool) -> int:
    shown: set[str] = set()

    # A callback makes the client declare elicitation, URL mode included, to the server.
    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if not isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action="decline")  # this client only knows URL mode
        if params.url not in shown:  # each retry names the same link: show it once
            shown.add(params.url)
            print(f"{params.message}\nOpen this link (it is on {urlsplit(params.url).netloc}):\n\n    {params.url}\n")
            print("Waiting for you to finish in the browser...", flush=True)
            if open_browser:
                await anyio.to_thread.run_sync(webbrowser.open, params.url)  # a browser command may block
        return ElicitResult(action="accept")

    headers = {"Authorization": f"Bearer {os.environ['TOKEN']}"}  # the user's access token for this server
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http), elicitation_callback=elicit) as client,
    ):
        result = await client.call_tool(tool, {})
    text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
    print(f"{tool}: {text}")
    return 1 if result.is_error else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP server's URL, e.g. http://127.0.0.1:9000/mcp")
    parser.add_argument("tool", help="the tool to call (without arguments)")
    parser.add_argument("--no-browser", action="store_true", help="only print the link")
    args = parser.parse_args()
    raise SystemExit(anyio.run(main, args.url, args.tool, not args.no_browser))
