"""Litestar dependencies that authenticate callers. The MCP-server API depends on ``server_client``."""

from __future__ import annotations

from litestar import Request
from litestar.di import Provide

from service.identity.keys import ApiKeyAuthenticator, AuthenticatedClient


async def _server_client(request: Request, authenticator: ApiKeyAuthenticator) -> AuthenticatedClient:  # type: ignore[type-arg]
    return await authenticator.authenticate(request.headers.get("authorization"))


provide_server_client = Provide(_server_client)
