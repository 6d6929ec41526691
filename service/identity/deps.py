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

if TYPE_CHECKING:
    from service.services import Services


def _authorization(request: Request) -> str | None:  # type: ignore[type-arg]
    """The ``Authorization`` header, read from the ASGI scope (names are lower case there).

    ``request.headers`` would build Litestar's ``Headers`` (a decoded copy of every header in a
    case-insensitive multidict): ~2 KB that a long-poll then holds for as long as it waits.
    """
    for name, value in request.scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


async def _server_client(request: Request, services: Services) -> AuthenticatedClient:  # type: ignore[type-arg]
    return await services.authenticator.authenticate(_authorization(request))


provide_server_client = Provide(_server_client)
