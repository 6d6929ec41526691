"""``elicitd admin mcp``: serve the admin MCP server until stopped (Ctrl-C, SIGTERM).

It runs on the same settings as every command (``ELICITD_DATABASE_URL``, ``ELICITD_KEYS``, and
``ELICITD_REDIS_URL`` so flow changes wake waiters) and needs an issuer marked for operator
sign-in (``elicitd operators signin …`` or the config file's ``[operator_signin]``): without one
nobody could sign in, so it refuses to start and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.cli_exits import CommandFailed, ExitCode, ensure_port_free

if TYPE_CHECKING:
    from service.admin.deps import AdminServices
    from service.operators.roles import OperatorSignIn

# ``service.admin.cli.OpenServices``, spelt here: that module registers this one.
OpenServices = Callable[[], contextlib.AbstractAsyncContextManager["AdminServices"]]

DEFAULT_PORT = 8766


async def _mark(services: AdminServices) -> OperatorSignIn | None:
    from service.operators.store import marked_issuer

    async with services.sessions() as session:
        marked = await marked_issuer(session)
    return None if marked is None else marked.signin


async def _serve(open_services: OpenServices, args: argparse.Namespace) -> None:
    import uvicorn

    from service.admin_mcp.server import build_server, http_app
    from service.logs import configure_logging

    resource_url = args.resource_url or f"http://{args.host}:{args.port}/mcp"
    async with open_services() as services:
        signin = await _mark(services)
        if signin is None:
            raise CommandFailed(
                "no issuer is marked for operator sign-in, so no operator could call the admin MCP server: "
                "mark one with `elicitd operators signin …` (or [operator_signin] in the config file)",
                ExitCode.CONFIGURATION,
            )
        settings: Any = getattr(services, "settings", None)
        if settings is not None:
            configure_logging(settings)
        mcp = build_server(services, signin, lambda: _mark(services), resource_url)
        config = uvicorn.Config(
            http_app(mcp, resource_url, args.host),
            host=args.host,
            port=args.port,
            log_config=None,
            access_log=False,
            server_header=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        print(f"elicitd admin MCP server: {resource_url} (operators of {signin.issuer})", file=sys.stderr, flush=True)
        await uvicorn.Server(config).serve()


def register(groups: Any, open_services: OpenServices) -> None:
    """``admin mcp`` in the ``elicitd admin`` tree (``service.admin.cli`` calls this)."""
    parser = groups.add_parser(
        "mcp", help="serve the admin MCP server (streamable HTTP; operators' access tokens from the operator issuer)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument(
        "--resource-url",
        help="the MCP endpoint's public URL, named in the protected-resource metadata and, unless the "
        "operator sign-in mark names an audience, required in the tokens' aud (default http://HOST:PORT/mcp)",
    )

    def run(args: argparse.Namespace) -> None:
        ensure_port_free(args.host, args.port)
        asyncio.run(_serve(open_services, args))

    parser.set_defaults(func=run)
