"""Your own MCP tool with elicitd, against ``make run`` (docs/mcp.md, "Your own tool in ten minutes").

``my_files`` needs the user's Demo Files account: elicitd connects it in the browser the first
time, and answers its token at once afterwards. The users sign in at Dev ID, the issuer ``make run``
serves, and their MCP client sends a Dev ID access token issued for this server (``aud``).
"""

import os

import httpx
import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from pydantic import AnyHttpUrl

from elicitd_client import ElicitdClient
from elicitd_client.auth import JwtVerifier
from elicitd_client.mcp import ElicitationDeclined, Elicitd

ELICITD_URL = os.environ.get("ELICITD_URL", "http://127.0.0.1:8000")
ISSUER = f"{ELICITD_URL}/dev/id"  # Dev ID: who signs the users' access tokens under `make run`
PORT = int(os.environ.get("PORT", "9000"))
RESOURCE = f"http://127.0.0.1:{PORT}/mcp"  # this server: the `aud` of the tokens it accepts

elicitd = Elicitd(ElicitdClient(ELICITD_URL, os.environ["ELICITD_API_KEY"]))
mcp = MCPServer(
    "my-files",
    token_verifier=JwtVerifier(ISSUER, audience=RESOURCE),
    auth=AuthSettings(
        issuer_url=AnyHttpUrl(ISSUER), resource_server_url=AnyHttpUrl(RESOURCE), validate_token_resource=True
    ),
    # The same key on every replica, so a round started on one can finish on another.
    request_state_security=RequestStateSecurity(keys=[os.environ["MCP_STATE_KEY"]], ttl=900),
)
elicitd.install(mcp)  # lets the helper answer `input_required` (protocol 2026-07-28)


@mcp.tool()
async def my_files(ctx: Context) -> str:
    """List the files in the user's Demo Files account."""
    try:
        token = await elicitd.require_token(ctx, provider="demo-files", scopes=["files:read"])
    except ElicitationDeclined:
        return "You chose not to connect Demo Files."
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"{ELICITD_URL}/dev/files/api/files", headers={"Authorization": token.authorization})
    files = answer.raise_for_status().json()["files"]
    return f"{len(files)} files: " + ", ".join(file["name"] for file in files)


if __name__ == "__main__":
    uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=PORT)
