"""The example MCP server (streamable HTTP, OAuth resource server) with four elicitd-backed tools.

Run it against ``make run`` (see README.md next to this file)::

    ELICITD_URL=http://127.0.0.1:8000 ELICITD_API_KEY=ek_... \\
    EXAMPLE_ISSUER=https://id.example.com EXAMPLE_AUDIENCE=http://127.0.0.1:9000/mcp \\
    EXAMPLE_PROVIDER=github EXAMPLE_FILES_URL=https://api.example.com/files \\
    python -m examples.mcp_server.server
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from elicitd_client import ElicitdClient
from elicitd_client.auth import JwtVerifier
from elicitd_client.handlers import WebhookHandlers
from elicitd_client.mcp import ElicitationCancelled, ElicitationDeclined, Elicitd

logger = logging.getLogger("example")


@dataclass(frozen=True)
class ExampleConfig:
    issuer: str  # who signs the MCP client's access tokens (the user's identity)
    audience: str  # this server's identifier in those tokens (`aud`)
    resource_url: str  # this server's public MCP URL, advertised to clients
    provider: str = "github"  # the third-party provider registered in elicitd
    scopes: tuple[str, ...] = ("repo",)
    files_url: str = "https://api.github.com/user/repos"
    name: str = "elicitd-example"
    # Shared by every replica so a round started on one can be retried on another (see docs/mcp.md).
    state_keys: tuple[str, ...] = ()
    webhook_secret: str | None = None  # elicitd's completion-webhook secret for this server client
    required_scopes: tuple[str, ...] = field(default=())
    # `file_count` gets the provider token by RFC 8693 token exchange, as any OAuth client can:
    # elicitd's URL, and this server client's name and API key (HTTP Basic at its token endpoint).
    elicitd_url: str | None = None
    client_name: str = "dev"
    api_key: str | None = field(default=None, repr=False)


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


async def exchanged_token(config: ExampleConfig) -> str | None:
    """The provider token for this request's user by token exchange; None when the user has not
    connected the provider yet (``invalid_grant``), or no exchange is configured."""
    user = get_access_token()
    if config.elicitd_url is None or config.api_key is None or user is None:
        return None
    async with httpx.AsyncClient(timeout=15) as http:
        answer = await http.post(
            f"{config.elicitd_url.rstrip('/')}/oauth/token",
            auth=(config.client_name, config.api_key),
            data={
                "grant_type": TOKEN_EXCHANGE,
                "subject_token": user.token,  # the user's own access token: the grant
                "subject_token_type": ACCESS_TOKEN,
                "audience": config.provider,
                "scope": " ".join(config.scopes),
            },
        )
    body = answer.json()
    if answer.status_code == 200:
        return str(body["access_token"])
    if body.get("error") == "invalid_grant":
        return None
    raise ToolError(f"elicitd refused the token exchange: {body.get('error_description')} [{body.get('error')}]")


async def fetch_files(config: ExampleConfig, authorization: str) -> list[str] | None:
    """The names of the user's files; None when the provider no longer accepts the token."""
    async with httpx.AsyncClient(timeout=15) as http:
        answer = await http.get(config.files_url, headers={"Authorization": authorization})
    if answer.status_code == 401:
        return None
    answer.raise_for_status()
    body = answer.json()
    files = body.get("files", body) if isinstance(body, dict) else body
    return [str(item.get("name")) for item in files if isinstance(item, dict)]


def build_server(config: ExampleConfig, elicitd: Elicitd) -> MCPServer:
    security = RequestStateSecurity(keys=list(config.state_keys), ttl=900) if config.state_keys else None
    mcp = MCPServer(
        config.name,
        log_level="WARNING",
        token_verifier=JwtVerifier(config.issuer, config.audience),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(config.issuer),
            resource_server_url=AnyHttpUrl(config.resource_url),
            required_scopes=list(config.required_scopes) or None,
            # JwtVerifier already enforces `aud`, which may be a logical name, not this URL.
            validate_token_resource=False,
        ),
        request_state_security=security,
    )
    elicitd.install(mcp)

    @mcp.tool()
    async def list_files(ctx: Context) -> str:
        """List the files in the user's account at the third-party provider."""
        try:
            token = await elicitd.require_token(ctx, provider=config.provider, scopes=config.scopes)
        except ElicitationDeclined:
            return f"You chose not to connect {config.provider}, so I cannot list your files."
        names = await fetch_files(config, token.authorization)
        if names is None:
            return f"{config.provider} no longer accepts the connection; ask me again to reconnect."
        return f"{len(names)} files: " + ", ".join(names)

    @mcp.tool()
    async def file_count(ctx: Context) -> str:
        """How many files the user has: the token by RFC 8693 exchange, the connect flow if none yet."""
        token = await exchanged_token(config)
        if token is None:
            try:
                token = (await elicitd.require_token(ctx, provider=config.provider, scopes=config.scopes)).access_token
            except ElicitationDeclined:
                return f"You chose not to connect {config.provider}, so I cannot count your files."
        names = await fetch_files(config, f"Bearer {token}")
        if names is None:
            return f"{config.provider} no longer accepts the connection; ask me again to reconnect."
        return f"You have {len(names)} files."

    @mcp.tool()
    async def deploy(service: str, environment: str, ctx: Context) -> str:
        """Deploy a service, after the user approved exactly this deploy in the browser."""
        try:
            consent = await elicitd.require_consent(
                ctx,
                title=f"Deploy {service} to {environment}",
                description=f"The service '{service}' will be built and deployed to '{environment}', replacing "
                "the running version.",
                details={"service": service, "environment": environment},
            )
        except ElicitationDeclined:
            return f"Deploy of {service} to {environment} cancelled: not approved."
        except ElicitationCancelled:
            return "Deploy paused: approve it when you are ready by asking again."
        return f"Deployed {service} to {environment} (consent receipt {consent.receipt_id})."

    @mcp.tool()
    async def premium_report(topic: str, ctx: Context) -> str:
        """A paid report: asks for a one-off payment of 5.00 USD first."""
        try:
            payment = await elicitd.require_payment(
                ctx, amount=500, currency="usd", description=f"Premium report on {topic}"
            )
        except ElicitationDeclined:
            return "No payment, no report."
        return f"Premium report on {topic} (payment {payment.payment_id}): everything is fine."

    # elicitd's webhook: verified, its verification challenge answered (a new URL receives nothing
    # before), and flow.completed told to 2025-11-25 clients as their elicitation's completion.
    hooks = WebhookHandlers(config.webhook_secret) if config.webhook_secret is not None else None
    if hooks is not None:

        @hooks.on("flow.completed")
        async def completed(event: dict[str, Any]) -> None:
            flow_id = event.get("data", {}).get("flow_id")
            if isinstance(flow_id, str):
                await elicitd.notify_completed(flow_id)

    # The SDK's custom_route has no return annotation, so mypy sees an untyped decorator.
    @mcp.custom_route("/elicitd/webhook", methods=["POST"])  # type: ignore[untyped-decorator]
    async def elicitd_webhook(request: Request) -> Response:
        if hooks is None:
            return JSONResponse({"error": "webhook not configured"}, status_code=404)
        reply = await hooks.handle(await request.body(), request.headers)
        return Response(reply.body, status_code=reply.status, media_type=reply.content_type)

    return mcp


def app_from_env() -> tuple[Starlette, ElicitdClient]:
    env = os.environ
    port = int(env.get("EXAMPLE_PORT", "9000"))
    resource = env.get("EXAMPLE_RESOURCE_URL", f"http://127.0.0.1:{port}/mcp")
    config = ExampleConfig(
        issuer=env["EXAMPLE_ISSUER"],
        audience=env.get("EXAMPLE_AUDIENCE", resource),
        resource_url=resource,
        provider=env.get("EXAMPLE_PROVIDER", "github"),
        scopes=tuple(env.get("EXAMPLE_SCOPES", "repo").split()),
        files_url=env.get("EXAMPLE_FILES_URL", "https://api.github.com/user/repos"),
        state_keys=tuple(k for k in env.get("EXAMPLE_STATE_KEYS", "").split(",") if k),
        webhook_secret=env.get("EXAMPLE_WEBHOOK_SECRET") or None,
        elicitd_url=env["ELICITD_URL"],
        client_name=env.get("ELICITD_CLIENT_NAME", "dev"),
        api_key=env["ELICITD_API_KEY"],
    )
    client = ElicitdClient(env["ELICITD_URL"], env["ELICITD_API_KEY"])
    return build_server(config, Elicitd(client)).streamable_http_app(), client


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    app, _ = app_from_env()
    # Idle connections are kept longer than a client's own pool keeps them (httpx: 5 s), so a client
    # never sends a request on a connection at the moment this server closes it: with both at 5 s
    # the retry after a browser step of about 5 s could meet "Server disconnected".
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("EXAMPLE_PORT", "9000")), timeout_keep_alive=75)


if __name__ == "__main__":
    main()
