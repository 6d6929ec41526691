"""The ``api_key`` kind's health probe: a stored key is checked with the provider's own check.

The probe pass lives in the connections layer (``service.connections.key_probes``), which cannot
read a kind's definitions; this is what the kind gives it, through its plugin's ``probes``
factory: the enabled API-key providers whose definition names a ``check`` (a catalog entry's
``verification`` request, ``api-key-providers set --catalog``), and for one key the very request
the form's live check sends (``_check_request``) — the key in its one header, never in the URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.apikeys.providers import LiveCheck, list_api_key_providers
from service.apikeys.service import _check_request
from service.connections.key_probes import KeyRequest, ProbeRequest
from service.kind_context import KindContext


def _request(check: LiveCheck, key: str, fields: Mapping[str, str]) -> ProbeRequest:
    url, headers = _check_request(check, key, fields)
    return ProbeRequest(method=check.method, url=url, headers=headers, timeout_seconds=check.timeout_seconds)


class ApiKeyProbes:
    """``service.connections.key_probes.KeyProbes`` for API-key providers."""

    def __init__(self, read_sessions: async_sessionmaker[AsyncSession]) -> None:
        self.read_sessions = read_sessions

    def __repr__(self) -> str:
        return "ApiKeyProbes()"

    async def probeable(self) -> Mapping[str, KeyRequest]:
        async with self.read_sessions() as session:
            providers = await list_api_key_providers(session)
        return {
            provider.name: partial(_request, provider.config.check)
            for provider in providers
            if provider.enabled and provider.config.check is not None
        }


def probes(context: KindContext) -> ApiKeyProbes:
    return ApiKeyProbes(context.read_sessions)
