"""The ``api_key`` kind at creation: the provider must be an enabled API-key provider.

Like ``oauth_connect``, a subject who already has an active key for the provider (and account)
needs no elicitation when this server client was granted it: the answer is ``completed`` with that
connection at once. Without a grant the flow carries the connection's id, and its page asks the
user to let this client use the key already stored instead of asking for it again.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.apikeys.providers import get_api_key_provider
from service.connections.providers import UnknownProvider
from service.db.base import CONNECTION_ID
from service.errors import InvalidRequest
from service.flows.kinds import NormalizedFlow, Satisfied, check_provider_allowed
from service.flows.schemas import CreateFlowRequest
from service.grants.repository import granted_scopes
from service.identity.keys import AuthenticatedClient

_STORED_KEY = text(
    "SELECT id, account_id, fields FROM connections WHERE subject_iss = :i AND subject_sub = :s "
    "AND provider = :p AND status = 'active' AND access_token_enc IS NOT NULL "
    "AND (CAST(:a AS text) IS NULL OR account_id = :a) ORDER BY updated_at DESC"
)


class ApiKeyKind:
    async def _stored(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, provider: str
    ) -> tuple[list[Any], set[uuid.UUID]]:
        """The subject's stored keys for the provider (newest first), and which this client may use."""
        rows = list(
            await session.execute(
                _STORED_KEY,
                {"i": request.subject.iss, "s": request.subject.sub, "p": provider, "a": request.account},
            )
        )
        granted = await granted_scopes(session, client.id, [row[0] for row in rows])
        return rows, set(granted)

    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow:
        if request.provider is None:
            raise InvalidRequest("An 'api_key' flow needs 'provider'.")
        if request.url is not None or request.scopes or request.params:
            raise InvalidRequest(
                "An 'api_key' flow takes only 'provider' (and optionally 'account').", extra={"code": "invalid_params"}
            )
        check_provider_allowed(client, request.provider)
        provider = await get_api_key_provider(session, request.provider)
        if provider is None or not provider.enabled:
            raise UnknownProvider(f"No enabled API-key provider is named '{request.provider}'.")
        params = {"account": request.account} if request.account is not None else {}
        rows, granted = await self._stored(session, client, request, provider.name)
        return NormalizedFlow(
            kind="api_key",
            provider=provider.name,
            scopes=(),
            params=params,
            message=request.message or f"Enter your {provider.display_name} {provider.config.key_label} to continue.",
            # A key is stored but not for this client: the page offers it (a grant page).
            connection_id=rows[0][0] if rows and not any(row[0] in granted for row in rows) else None,
        )

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        if flow.connection_id is not None:
            return None
        rows, granted = await self._stored(session, client, request, str(flow.provider))
        row = next((row for row in rows if row[0] in granted), None)
        if row is None:
            return None
        return Satisfied(
            result={
                "connection_id": CONNECTION_ID.format(row[0]),
                "provider": flow.provider,
                "account_id": row[1],
                "fields": row[2] or {},
            }
        )
