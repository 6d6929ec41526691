"""The pages at the addresses ``make run`` prints: ``/`` (this instance), ``/dev/id`` and
``/dev/files``. Each says what is there and how to use it from a terminal, with this instance's
own URLs, so a person who opens one finds the next step instead of a JSON 404."""

from __future__ import annotations

import json
from typing import Any

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

from service.devtools.files import FILES_PATH, SCOPE_WORDS
from service.devtools.issuer import ID_PATH, SUGGESTED_USERS
from service.devtools.pages import DEMO_FILES_LOOK, DEV_ID_LOOK, DEV_INSTANCE_LOOK, render

WIDE = {"width": "42rem"}  # room for the URLs and the example command on one line

OWN_TOOL_DOCS = "docs/mcp.md, \u201cYour own tool in ten minutes\u201d (docs/typescript.md for TypeScript)"


def _mint_example(issuer: str) -> str:
    body = json.dumps({"sub": SUGGESTED_USERS[0], "audience": "http://127.0.0.1:9000/mcp"})
    return f"curl -s -X POST {issuer}/mint -H 'Content-Type: application/json' \\\n  -d '{body}'"


def about_routes(base: str, provider: str) -> list[HTTPRouteHandler]:
    issuer, files = base + ID_PATH, base + FILES_PATH

    @get("/", include_in_schema=False, sync_to_thread=False)
    def instance() -> Response[Any]:
        return render(
            "about.html",
            {**DEV_INSTANCE_LOOK, **WIDE},
            title="elicitd is running on this machine",
            intro="A development instance: embedded PostgreSQL and Redis, a dev server client, and two "
            "stand-ins to try connecting an account (Dev ID signs people in, Demo Files is the provider).",
            facts=[
                ("API docs", f"{base}/schema", "/schema"),
                ("Readiness", f"{base}/readyz", "/readyz"),
                ("Your connections", f"{base}/me", "/me"),
                ("Dev ID (issuer)", issuer, ID_PATH),
                ("Demo Files (provider)", files, FILES_PATH),
                ("Dev API key", ".data/dev-api-key (server client dev)", None),
            ],
            example_intro="Try it from a second terminal:",
            example="make demo HEADLESS=1",
            next=f"Then write your own tool: {OWN_TOOL_DOCS}.",
        )

    @get([ID_PATH, f"{ID_PATH}/"], include_in_schema=False, sync_to_thread=False)
    def dev_id() -> Response[Any]:
        return render(
            "about.html",
            {**DEV_ID_LOOK, **WIDE},
            title="Dev ID",
            intro="The OpenID Connect issuer of this instance's users: sign in as any name (no password), "
            "which becomes the user id (sub). It signs ID and access tokens with ES256.",
            facts=[
                ("Issuer", issuer, None),
                (
                    "Discovery",
                    f"{issuer}/.well-known/openid-configuration",
                    f"{ID_PATH}/.well-known/openid-configuration",
                ),
                ("Keys (JWKS)", f"{issuer}/jwks", f"{ID_PATH}/jwks"),
                ("Suggested users", ", ".join(SUGGESTED_USERS), None),
            ],
            example_intro="A user's access token for your MCP server, without a browser (what an MCP "
            "client gets through the MCP authorization flow):",
            example=_mint_example(issuer),
            next=f"The audience is your MCP server's URL; see {OWN_TOOL_DOCS}.",
        )

    @get([FILES_PATH, f"{FILES_PATH}/"], include_in_schema=False, sync_to_thread=False)
    def demo_files() -> Response[Any]:
        return render(
            "about.html",
            {**DEMO_FILES_LOOK, **WIDE},
            title="Demo Files",
            intro="An OAuth 2 provider with a small files API, registered in this elicitd as a provider. "
            "Each account name has its own files.",
            facts=[
                ("Provider", provider, None),
                ("Scopes", ", ".join(SCOPE_WORDS), None),
                ("Files API", f"GET {files}/api/files", None),
                ("Account", f"GET {files}/api/me", None),
                (
                    "Metadata",
                    f"{base}/.well-known/oauth-authorization-server{FILES_PATH}",
                    f"/.well-known/oauth-authorization-server{FILES_PATH}",
                ),
            ],
            example_intro="With a user's Demo Files token (from elicitd: require_token in a tool, or "
            "GET /v1/connections/demo-files/token):",
            example=f"curl -s {files}/api/files \\\n  -H 'Authorization: Bearer <token>'",
            next="A connect flow brings a person here to allow access; elicitd keeps the token.",
        )

    return [instance, dev_id, demo_files]
