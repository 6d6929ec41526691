"""The ``api_key`` kind at creation: the provider must be an enabled API-key provider.

Like ``oauth_connect``, a subject who already has an active key for the provider (and account)
needs no elicitation: the answer is ``completed`` with that connection at once.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.apikeys.providers import get_api_key_provider
from service.connections.providers import UnknownProvider
from service.db.base import CONNECTION_ID
from service.errors import InvalidRequest
from service.flows.kinds import NormalizedFlow, Satisfied, check_provider_allowed
from service.flows.schemas import CreateFlowRequest
from service.identity.keys import AuthenticatedClient


class ApiKeyKind:
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
        return NormalizedFlow(
            kind="api_key",
            provider=provider.name,
            scopes=(),
            params=params,
            message=request.message or f"Enter your {provider.display_name} {provider.config.key_label} to continue.",
        )

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        row = (
            await session.execute(
                text(
                    "SELECT id, account_id, fields FROM connections WHERE subject_iss = :i AND subject_sub = :s "
                    "AND provider = :p AND status = 'active' AND access_token_enc IS NOT NULL "
                    "AND (CAST(:a AS text) IS NULL OR account_id = :a) ORDER BY updated_at DESC LIMIT 1"
                ),
                {"i": request.subject.iss, "s": request.subject.sub, "p": flow.provider, "a": request.account},
            )
        ).first()
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
