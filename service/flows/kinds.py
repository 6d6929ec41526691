"""What differs between flow kinds at creation time.

Each kind has a ``KindHandler``: it validates and normalizes the request (so two equivalent
requests get the same reuse key), writes the default message, and may answer "already satisfied"
(an ``oauth_connect`` whose connection already covers the scopes). Domains register richer
handlers for their kinds in ``create_app``; the defaults here only validate the shape.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import Forbidden, InvalidRequest
from service.flows.schemas import CreateFlowRequest
from service.identity.keys import AuthenticatedClient
from service.urls import url_problem


@dataclass(frozen=True, slots=True)
class NormalizedFlow:
    kind: str
    provider: str | None
    scopes: tuple[str, ...]
    params: dict[str, Any]
    message: str
    external_url: str | None = None
    connection_id: Any = None

    @property
    def reuse_key(self) -> str:
        """Digest of everything that makes two requests "the same" for create-or-reuse."""
        material = json.dumps(
            {"p": self.provider, "s": sorted(self.scopes), "x": self.params, "u": self.external_url},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Satisfied:
    """The request is already fulfilled; no elicitation is needed."""

    result: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


class KindHandler(Protocol):
    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow: ...

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None: ...


def check_provider_allowed(client: AuthenticatedClient, provider: str | None) -> None:
    if provider is not None and client.allowed_providers and provider not in client.allowed_providers:
        raise Forbidden(
            f"This server client may not use the provider '{provider}'.", extra={"code": "provider_not_allowed"}
        )


def check_issuer_trusted(client: AuthenticatedClient, issuer: str) -> None:
    if client.trusted_issuers and issuer not in client.trusted_issuers:
        raise Forbidden("This server client does not trust the subject's issuer.", extra={"code": "issuer_not_trusted"})


def check_external_url(url: str | None) -> str:
    """The caller's own page: https anywhere, plain http only on loopback; no credentials in it."""
    if url is None:
        raise InvalidRequest("An 'external' flow needs 'url': the page your server hosts for this step.")
    # The URL rule (service/urls.py): MCP clients show and open it, so a line break or a host that
    # parsers read differently must never reach them.
    problem = url_problem(url, fragment=True)
    if problem is not None:
        raise InvalidRequest(f"'url' is not usable: {problem}.")
    return url


class BasicKind:
    """Shape checks only. Used for ``external`` and for kinds whose domain adds nothing more."""

    def __init__(self, kind: str, *, default_message: str, needs_provider: bool = False) -> None:
        self.kind = kind
        self.default_message = default_message
        self.needs_provider = needs_provider

    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow:
        if self.needs_provider and request.provider is None:
            raise InvalidRequest(f"A '{self.kind}' flow needs 'provider'.")
        if self.kind != "external" and request.url is not None:
            raise InvalidRequest("'url' is only accepted for 'external' flows; elicitd hosts the page for this kind.")
        check_provider_allowed(client, request.provider)
        external_url = check_external_url(request.url) if self.kind == "external" else None
        return NormalizedFlow(
            kind=self.kind,
            provider=request.provider,
            scopes=tuple(sorted(set(request.scopes))),
            params=dict(request.params),
            message=request.message or self.default_message,
            external_url=external_url,
        )

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        return None
