"""The admin MCP server (``elicitd admin mcp``): operators' reads and actions as MCP tools.

Built with the official ``mcp`` SDK and served over streamable HTTP, as an OAuth protected
resource (the MCP authorization spec): every request carries an operator's access token from the
issuer marked for operator sign-in (``service.admin_mcp.auth``), a request without a valid one is
answered ``401`` with ``WWW-Authenticate: Bearer … resource_metadata=…``, and the RFC 9728
metadata at ``/.well-known/oauth-protected-resource/mcp`` names the resource and that issuer as
its authorization server, so an MCP client finds where to sign in by itself.

Roles are the console's and the admin API's: ``tools/list`` shows a caller the tools its role may
call (a viewer sees only the reads), and calling one above the role is refused — with the audit
row the admin API writes for a refused call (403). Tool lists differ per caller, so they are
marked private and immediately stale for clients that cache (SEP-2549).

The server runs in its own process, on the same services as every command (``open_services``):
it shares the database and Redis with the replicas and needs no port of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp.server.auth.settings import AuthSettings
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult, Tool, ToolAnnotations
from starlette.applications import Starlette

from service.admin import flows
from service.admin.deps import AdminServices
from service.admin_mcp import tools
from service.admin_mcp.auth import OperatorToken, OperatorTokenVerifier, SignInSource, current_operator
from service.operators.roles import OperatorSignIn

NAME = "elicitd-admin"
MCP_PATH = "/mcp"
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ACT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
REVOKE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
FlowState = Literal["pending", "completed", "declined", "cancelled", "expired", "failed"]
FlowKind = Literal["oauth_connect", "api_key", "consent", "payment", "external"]


def _operator() -> OperatorToken:
    operator = current_operator()
    if operator is None:  # the SDK's RequireAuthMiddleware lets no such request through
        raise ToolError("An operator's access token is required.")
    return operator


class AdminMCPServer(MCPServer[Any]):
    """``MCPServer`` whose tool list and calls follow the caller's role (``tools.ROLES``)."""

    def __init__(self, services: AdminServices, **options: Any) -> None:
        super().__init__(NAME, **options)
        self._services = services

    async def list_tools(self) -> list[Tool]:
        operator = current_operator()
        if operator is None:
            return []
        return [
            t for t in await super().list_tools() if tools.ROLES.get(t.name, max(tools.ROLES.values())) <= operator.role
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        operator = _operator()
        needed = tools.ROLES.get(name)
        if needed is not None and operator.role < needed:
            await tools.write_refusal(self._services, operator, name, arguments, 403)
            raise ToolError(f"This tool needs the '{needed.label}' role (forbidden).")
        return await super().call_tool(name, arguments, context)


def build_server(
    services: AdminServices, signin: OperatorSignIn, source: SignInSource, resource_url: str
) -> AdminMCPServer:
    """The server with its five tools, verifying tokens at ``signin``'s issuer for ``resource_url``."""
    verifier = OperatorTokenVerifier(services.issuers, source, resource_url=resource_url)
    mcp = AdminMCPServer(
        services,
        instructions="Operate elicitd: find flows, explain why a person's tool call fails, list stuck "
        "webhooks and replay one, revoke a grant. Every call is audited.",
        log_level="WARNING",
        token_verifier=verifier,
        # From strings, so the settings keep a path-less issuer as it is written (no trailing
        # slash): RFC 8414 compares issuers as exact strings.
        auth=AuthSettings.model_validate(
            {
                "issuer_url": signin.issuer,
                "resource_server_url": resource_url,
                # The verifier checks the audience itself (the mark's, or this URL).
                "validate_token_resource": False,
            }
        ),
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
    )

    @mcp.tool(annotations=READ)
    async def find_flow(
        flow_id: str | None = None,
        subject_iss: str | None = None,
        subject_sub: str | None = None,
        server_client: str | None = None,
        kind: FlowKind | None = None,
        state: FlowState | None = None,
        provider: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """One flow with its whole history (give flow_id, fl_…), or flows newest first matching the
        filters (a subject is its issuer and sub together; server_client is an sc_… id)."""
        arguments = {k: v for k, v in locals().items() if v is not None}
        filters = flows.FlowFilters(
            status=state,
            kind=kind,
            server_client=server_client,
            provider=provider,
            subject_iss=subject_iss,
            subject_sub=subject_sub,
            created_after=created_after,
            created_before=created_before,
        )
        return await tools.find_flow(services, _operator(), arguments, filters)

    @mcp.tool(annotations=READ)
    async def explain_tool_failure(
        subject_iss: str, subject_sub: str, provider: str | None = None, server_client: str | None = None
    ) -> dict[str, Any]:
        """Why a person's tool call fails: their connections (status, health reason, authorizations),
        every grant of them (and whether server_client — an sc_… id or name — holds one), their
        recent flows and how they ended, and findings with stable codes, most decisive first."""
        arguments: Mapping[str, Any] = {
            "subject_iss": subject_iss,
            "subject_sub": subject_sub,
            "provider": provider,
            "server_client": server_client,
        }
        return await tools.explain(services, _operator(), arguments)

    @mcp.tool(annotations=READ)
    async def list_stuck_webhooks(server_client: str | None = None, limit: int = 20) -> dict[str, Any]:
        """Webhook deliveries that are stuck: abandoned ones, waiting ones that failed at least once
        (with their last status and error), and the whole backlog of undelivered events."""
        return await tools.stuck_webhooks(services, _operator(), {"server_client": server_client, "limit": limit})

    @mcp.tool(annotations=ACT)
    async def replay_webhook(delivery_id: str) -> dict[str, Any]:
        """Deliver a webhook event again (delivered or abandoned) with a fresh retry window; refused
        while an attempt is in flight. Needs the operator role."""
        return await tools.replay(services, _operator(), delivery_id)

    @mcp.tool(annotations=REVOKE)
    async def revoke_grant(grant_id: str) -> dict[str, Any]:
        """Revoke a grant (gr_…): its server client's next token request is answered as if there were
        no connection. Needs the operator role."""
        return await tools.revoke_grant(services, _operator(), grant_id)

    return mcp


def http_app(mcp: AdminMCPServer, resource_url: str, host: str) -> Starlette:
    """The streamable HTTP app. Stateless: any replica of the admin MCP server answers any request.
    Host and Origin checks (DNS rebinding) admit the resource URL's own host, and loopback."""
    parts = urlsplit(resource_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[parts.netloc, "127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=[origin, "http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    return mcp.streamable_http_app(
        streamable_http_path=parts.path or MCP_PATH, stateless_http=True, transport_security=security, host=host
    )
