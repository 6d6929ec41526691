"""Litestar dependencies that authenticate callers. The MCP-server API depends on ``server_client``.

The provider takes ``services`` (not the authenticator by name), and the API handlers take
``services`` too: Litestar resolves dependencies that do not depend on each other concurrently,
in an anyio task group with a task each, which cost ~5% of a status read. A chain
(``services`` → ``client``) resolves one after the other, inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar import Request
from litestar.di import Provide

from service.identity.keys import AuthenticatedClient
from service.limits import header_value

if TYPE_CHECKING:
    from service.services import Services


async def _server_client(request: Request, services: Services) -> AuthenticatedClient:  # type: ignore[type-arg]
    # From the scope, not ``request.headers``: see ``header_value``.
    return await services.authenticator.authenticate(header_value(request.scope, b"authorization"))


provide_server_client = Provide(_server_client)
