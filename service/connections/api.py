"""The MCP-server API for connections: get a usable token, or disconnect.

Thin handlers over ``ConnectionService``. The token endpoint is the only place a token ever
leaves elicitd, and only to a server client allowed that provider.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get
from litestar.datastructures import CacheControlHeader
from litestar.params import Parameter

from service.connections.deps import ConnectionApiDeps
from service.connections.schemas import RevokeResponse, TokenResponse
from service.errors import InvalidRequest
from service.identity.deps import provide_server_client
from service.identity.keys import AuthenticatedClient
from service.identity.subject_proof import SubjectTokenHeader
from service.problems import problem_responses

Iss = Annotated[str, Parameter(min_length=1, max_length=512, description="The subject's issuer")]
Sub = Annotated[str, Parameter(min_length=1, max_length=255, description="The subject's `sub` at that issuer")]
Account = Annotated[
    str | None,
    Parameter(max_length=255, default=None, description="The provider account id, when the subject has several"),
]


def _provider(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "_.-" for c in name) or name != name.lower():
        raise InvalidRequest("The provider name is not valid.")
    return name


class ConnectionController(Controller):
    """Handlers take ``services``, which ``client`` also depends on (see ``service.identity.deps``)."""

    path = "/v1/connections"
    tags = ["connections"]
    dependencies = {"client": provide_server_client}
    security = [{"apiKey": []}]

    @get(
        "/{provider:str}/token",
        operation_id="getConnectionToken",
        cache=False,
        # RFC 6749 §5.1: a response carrying a token is never stored by a cache.
        cache_control=CacheControlHeader(no_store=True),
        responses=problem_responses(400, 401, 403, 404, 409),
        summary="A valid access token for the subject's connection (refreshed first when near expiry)",
        description="404 `not_connected` when there is no connection this server client was granted (the "
        "same answer, byte for byte, whether or not someone else connected); 409 `reauthorization_required` when "
        "the provider revoked it (create an `oauth_connect` flow to reconnect, the connection id "
        "stays); 409 `insufficient_scope` when `scopes` are not all granted.",
    )
    async def token(
        self,
        services: ConnectionApiDeps,
        client: AuthenticatedClient,
        provider: str,
        iss: Iss,
        sub: Sub,
        account: Account = None,
        scopes: Annotated[
            str | None,
            Parameter(max_length=2000, default=None, description="Space-separated scopes that must be granted"),
        ] = None,
        subject_token: SubjectTokenHeader = None,
    ) -> TokenResponse:
        await services.subjects.prove(client, iss=iss, sub=sub, token=subject_token)
        return await services.connections.token(
            client, _provider(provider), iss=iss, sub=sub, scopes=(scopes or "").split(), account=account
        )

    @delete(
        "/{provider:str}",
        operation_id="revokeConnection",
        status_code=200,
        responses=problem_responses(400, 401, 403),
        summary="Disconnect: revoke at the provider (RFC 7009) when it can, and locally always",
    )
    async def revoke(
        self,
        services: ConnectionApiDeps,
        client: AuthenticatedClient,
        provider: str,
        iss: Iss,
        sub: Sub,
        account: Account = None,
        subject_token: SubjectTokenHeader = None,
    ) -> RevokeResponse:
        await services.subjects.prove(client, iss=iss, sub=sub, token=subject_token)
        return await services.connections.revoke(client, _provider(provider), iss=iss, sub=sub, account=account)
