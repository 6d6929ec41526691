"""Litestar dependencies that authenticate callers. The MCP-server API depends on ``server_client``."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import Provide

from service.identity.keys import AuthenticatedClient


async def _server_client(request: Request[Any, Any, Any]) -> AuthenticatedClient:
    authenticator = request.app.state.authenticator
    return await authenticator.authenticate(request.headers.get("authorization"))  # type: ignore[no-any-return]


provide_server_client = Provide(_server_client)
