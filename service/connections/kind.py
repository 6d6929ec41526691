"""The ``oauth_connect`` flow kind: what ``POST /v1/flows`` does before any browser is involved.

It decides between three answers: *already satisfied* (an active connection covers the scopes:
no elicitation at all), a *new connect* flow, or a *reconnect / more scopes* flow that carries the
existing connection's id so completing it updates that connection instead of making another.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from service.connections import repository as repo
from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, Connection
from service.connections.providers import UnknownProvider, get_provider
from service.connections.service import connection_result
from service.errors import InvalidRequest
from service.flows.kinds import NormalizedFlow, Satisfied, check_provider_allowed
from service.flows.schemas import CreateFlowRequest
from service.identity.keys import AuthenticatedClient


def check_scopes(scopes: list[str], separator: str) -> None:
    """A requested scope holding the provider's separator would be one permission on the page and
    several at the provider (``a,b`` for a comma-separated provider): refused, each is asked alone."""
    if separator.strip() and any(separator in scope for scope in scopes):
        raise InvalidRequest(
            f"A scope may not contain '{separator}', this provider's scope separator: list each scope on its own.",
            extra={"code": "invalid_scope"},
        )


class OAuthConnectKind:
    kind = "oauth_connect"

    async def _connections(self, session: AsyncSession, request: CreateFlowRequest) -> list[Connection]:
        assert request.provider is not None
        return await repo.live_connections(
            session,
            iss=request.subject.iss,
            sub=request.subject.sub,
            provider=request.provider,
            account=request.account,
        )

    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow:
        if request.provider is None:
            raise InvalidRequest("An 'oauth_connect' flow needs 'provider'.")
        if request.url is not None:
            raise InvalidRequest("'url' is only accepted for 'external' flows; elicitd hosts the page for this kind.")
        check_provider_allowed(client, request.provider)
        provider = await get_provider(session, request.provider)
        if provider is None or not provider.enabled:
            raise UnknownProvider(f"No enabled provider is named '{request.provider}'.")
        if provider.auth_type != "oauth2":
            raise InvalidRequest(
                f"'{request.provider}' takes an API key, not OAuth: create an 'api_key' flow.",
                extra={"code": "wrong_flow_kind"},
            )
        check_scopes(request.scopes, provider.scope_separator)
        requested = set(request.scopes or provider.default_scopes or [])
        scopes, connection_id = requested, None
        found = await self._connections(session, request)
        covering = [c for c in found if c.status == ACTIVE and requested <= set(c.scopes or [])]
        if not covering and found:
            # Reconnect (the provider revoked the grant) or more scopes: ask for the union, so the
            # new grant replaces the old one without losing what the connection could already do.
            current = next((c for c in found if c.status == REAUTHORIZATION_REQUIRED), found[0])
            scopes = requested | set(current.scopes or [])
            connection_id = current.id
        params = dict(request.params)
        if request.account is not None:
            params["account"] = request.account
        return NormalizedFlow(
            kind=self.kind,
            provider=request.provider,
            scopes=tuple(sorted(scopes)),
            params=params,
            message=request.message or f"Connect your {provider.display_name} account to continue.",
            connection_id=connection_id,
        )

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        if flow.connection_id is not None:
            return None
        wanted = set(flow.scopes)
        for conn in await self._connections(session, request):
            if conn.status == ACTIVE and wanted <= set(conn.scopes or []):
                return Satisfied(result=connection_result(conn))
        return None
