"""The ``oauth_connect`` flow kind: what ``POST /v1/flows`` does before any browser is involved.

It decides between four answers: *already satisfied* (this server client's own grant points at a
live authorization holding the scopes: no elicitation at all), a *grant* flow (an authorization of
the account holds the scopes but this client was not granted it: its page asks the user — share
it when it holds exactly those, else connect separately or share the wider access), a *new
connect* flow, or a *reconnect / more scopes* flow that carries the existing connection's id so
completing it adds an authorization to that connection (for the same provider account) instead of
making another connection. ``reconnect: cn_…`` asks for that last one by name, whatever the
connection's health: the provider step runs again and must answer for the same account.

A client without a grant learns nothing from the answer: every case but *satisfied* is the same
``pending`` flow with the scopes the client asked for (``service.grants``).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.connections import repository as repo
from service.connections.catalog import CATALOG, placeholders
from service.connections.models import ACTIVE, REAUTHORIZATION_REQUIRED, Connection, Provider
from service.connections.providers import InvalidParameter, UnknownProvider, get_provider
from service.connections.schemas import connection_result
from service.db.base import CONNECTION_ID
from service.errors import InvalidRequest, NotConnected
from service.flows.kinds import NormalizedFlow, Satisfied, check_provider_allowed
from service.flows.schemas import CreateFlowRequest
from service.grants.repository import ClientGrant, active_authorizations, client_grants
from service.identity.keys import AuthenticatedClient


def check_scopes(scopes: list[str], separator: str) -> None:
    """A requested scope holding the provider's separator would be one permission on the page and
    several at the provider (``a,b`` for a comma-separated provider): refused, each is asked alone."""
    if separator.strip() and any(separator in scope for scope in scopes):
        raise InvalidRequest(
            f"A scope may not contain '{separator}', this provider's scope separator: list each scope on its own.",
            extra={"code": "invalid_scope"},
        )


def check_parameters(provider: Provider, params: dict[str, Any]) -> None:
    """The connection parameters an MCP server gives in ``params`` (Shopify's ``shop``), each held
    to its catalog pattern now: a bad one is the server's mistake, never the person's page. Those it
    leaves out the person enters on the connect page."""
    entry = CATALOG.get(provider.catalog or "")
    if entry is None:
        return
    templates = (provider.authorization_endpoint, provider.token_endpoint, provider.account_endpoint)
    open_names = {name for url in templates if url for name in placeholders(url)}
    for name in sorted(open_names & set(params)):
        declared = entry.parameters.get(name)
        value = params[name]
        if declared is None or not isinstance(value, str) or not declared.accepts(value):
            raise InvalidParameter(
                f"The connection parameter '{name}' does not match its pattern.", extra={"parameter": name}
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
        check_parameters(provider, request.params)
        requested = set(request.scopes or provider.default_scopes or [])
        scopes, connection_id = requested, None
        found = await self._connections(session, request)
        mine = await client_grants(session, client.id, [c.id for c in found])
        if request.reconnect is not None:
            # Asked by id: only a live connection of this subject and provider that this client
            # holds a grant on; any other id is answered as no connection at all (no oracle).
            wanted = CONNECTION_ID.parse(request.reconnect)
            named = next((c for c in found if c.id == wanted and c.id in mine), None)
            if named is None:
                raise NotConnected(f"The subject has no connection to '{request.provider}' with this id.")
            scopes, connection_id = requested | set(mine[named.id].scopes), named.id
        elif any(_serves(mine.get(c.id), requested) for c in found if c.status == ACTIVE):
            pass  # satisfied: ``satisfied`` answers it with the client's own grant
        else:
            covering = await _covering(session, [c for c in found if c.status == ACTIVE], requested)
            if covering is not None:
                # Connected, with an authorization that holds what is asked, but not for this client:
                # its page asks the user to grant (no provider trip when the scopes are exactly
                # those; a separate authorization offered first when that one holds more).
                connection_id = covering
            elif found:
                # Reconnect (the provider revoked this client's authorization) or more scopes. The
                # provider is asked for what this client already holds too (``ConnectService.start``),
                # never for what other servers hold; the flow names what it asks plus what it holds.
                current = next((c for c in found if c.id in mine), None) or next(
                    (c for c in found if c.status == REAUTHORIZATION_REQUIRED), found[0]
                )
                held = mine.get(current.id)
                scopes = requested | (set(held.scopes) if held else set())
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
        mine = await client_grants(session, client.id, [c.id for c in found])
        for conn in found:
            grant = mine.get(conn.id)
            # Only with a grant of this client's own: a connection it was never granted is not
            # reported, even when no scope is asked (an empty set is inside every set).
            if grant is not None and _serves(grant, wanted):
                granted = sorted(grant.scopes & grant.authorization_scopes)
                return Satisfied(result={**connection_result(conn), "scopes": granted})
        return None


def _serves(grant: ClientGrant | None, wanted: set[str]) -> bool:
    """The client's grant hands out a live token holding ``wanted`` and nothing it does not name."""
    return (
        grant is not None
        and grant.authorization_status == ACTIVE
        and wanted <= (grant.scopes & grant.authorization_scopes)
        and grant.authorization_scopes <= grant.scopes
    )


async def _covering(session: AsyncSession, active: list[Connection], wanted: set[str]) -> uuid.UUID | None:
    """The newest active connection with an active authorization holding every ``wanted`` scope."""
    for conn in active:
        if any(wanted <= auth.scopes for auth in await active_authorizations(session, conn.id)):
            return conn.id
    return None
