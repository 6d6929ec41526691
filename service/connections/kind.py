"""The ``oauth_connect`` flow kind: what ``POST /v1/flows`` does before any browser is involved.

It decides between four answers: *already satisfied* (an active connection covers the scopes and
this server client was granted them: no elicitation at all), a *grant* flow (a connection covers
the scopes but this client was not granted them: its page asks the user, with no provider round
trip), a *new connect* flow, or a *reconnect / more scopes* flow that carries the existing
connection's id so completing it updates that connection instead of making another.

A client without a grant learns nothing from the answer: every case but *satisfied* is the same
``pending`` flow with the scopes the client asked for (``service.grants``).
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
from service.grants.repository import granted_scopes
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
        granted = await granted_scopes(session, client.id, [c.id for c in found])
        covering = [c for c in found if c.status == ACTIVE and requested <= set(c.scopes or [])]
        if covering:
            if not any(requested <= granted.get(c.id, set()) for c in covering):
                # Connected, but not for this client: its page asks the user to grant (no provider).
                connection_id = covering[0].id
        elif found:
            # Reconnect (the provider revoked the grant) or more scopes. The provider is asked for
            # the connection's scopes too when the user goes there (``ConnectService.start``), so the
            # new grant replaces the old one without losing what other clients use; the flow itself
            # names what this client asks for plus what it was granted already.
            current = next((c for c in found if c.status == REAUTHORIZATION_REQUIRED), found[0])
            scopes = requested | (granted.get(current.id, set()) & set(current.scopes or []))
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
        found = [c for c in await self._connections(session, request) if c.status == ACTIVE]
        granted = await granted_scopes(session, client.id, [c.id for c in found])
        for conn in found:
            held = set(conn.scopes or [])
            mine = granted.get(conn.id, set()) & held
            if wanted <= mine:
                return Satisfied(result={**connection_result(conn), "scopes": sorted(mine)})
        return None
