"""Litestar dependencies that authenticate callers. The MCP-server API depends on ``server_client``.

The provider takes ``services`` (not the authenticator by name), and the API handlers take
``services`` too: Litestar resolves dependencies that do not depend on each other concurrently,
in an anyio task group with a task each, which cost ~5% of a status read. A chain
(``services`` → ``client``) resolves one after the other, inline.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from litestar import Request
from litestar.di import Provide
from litestar.params import Dependency

from service.identity.keys import ApiKeyAuthenticator, AuthenticatedClient
from service.limits import header_value


class AuthenticatorServices(Protocol):
    """The part of the container that authenticates a server client's key."""

    @property
    def authenticator(self) -> ApiKeyAuthenticator: ...


# The ``services`` dependency as AuthenticatorServices (see ``service.flows.deps``).
AuthenticatorDeps = Annotated[AuthenticatorServices, Dependency(skip_validation=True)]


async def _server_client(request: Request, services: AuthenticatorDeps) -> AuthenticatedClient:  # type: ignore[type-arg]
    # From the scope, not ``request.headers``: see ``header_value``.
    return await services.authenticator.authenticate(header_value(request.scope, b"authorization"))


provide_server_client = Provide(_server_client)
