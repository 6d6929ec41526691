"""``KindContext``: what the composition root hands every flow kind's plugin.

A kind builds its own services from these shared, long-lived objects (its plugin's ``services``
factory), so the container and ``build_services`` name no kind: a new kind is its package and its
registry line. The context sits between the resources it carries and the kinds that read it.

A kind's services extend the context (``@dataclass(...) class XKindServices(KindContext)`` plus the
kind's own service), so a resource a page comes to need (the grant page's parts, a brand) is one
field here, and each kind's handlers still read only what their own ``deps`` Protocol names.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import httpx
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.branding.service import BrandService
    from service.clock import Clock
    from service.connections.service import ConnectionService
    from service.crypto.vault import Vault
    from service.flows.service import FlowService
    from service.grants.service import GrantService
    from service.identity.issuers import IssuerDirectory
    from service.settings import Settings
    from service.signin.gate import BrowserGate


@dataclass(frozen=True, slots=True, kw_only=True)
class KindContext:
    """The shared objects a kind's services are built from; each is the one the container holds."""

    settings: Settings
    clock: Clock
    sessions: async_sessionmaker[AsyncSession]
    read_sessions: async_sessionmaker[AsyncSession]
    http: httpx.AsyncClient
    vault: Vault
    flows: FlowService
    gate: BrowserGate
    issuers: IssuerDirectory
    connections: ConnectionService
    grants: GrantService
    brands: BrandService

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def parts(self) -> dict[str, Any]:
        """The context's fields by name, to build a kind's services that extend it."""
        return {field.name: getattr(self, field.name) for field in fields(KindContext)}


T = TypeVar("T")


class OpenKind(Protocol):
    """What a kind's commands are handed (``register(subparsers, open_kind)`` in ``service.cli``):
    the services the ``name`` kind built, as ``of``, on a started service that is closed on the way
    out; a kind's command module never opens the whole service itself."""

    def __call__(self, name: str, of: type[T], /) -> contextlib.AbstractAsyncContextManager[T]: ...
