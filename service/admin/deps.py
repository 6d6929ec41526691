"""What admin handlers share: the parts of the services they use, and one unit of work per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.unit import unit_of_work

if TYPE_CHECKING:
    import httpx
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.connections.service import ConnectionService
    from service.crypto.vault import Vault
    from service.flows.service import FlowService
    from service.identity.issuers import IssuerDirectory
    from service.identity.keys import ApiKeyAuthenticator
    from service.payments.service import PaymentService
    from service.signals.webhooks import WebhookWorker


class AdminServices(Protocol):
    """The parts of the container the admin API and its commands use."""

    @property
    def authenticator(self) -> ApiKeyAuthenticator: ...

    @property
    def connections(self) -> ConnectionService: ...

    @property
    def flows(self) -> FlowService: ...

    @property
    def http(self) -> httpx.AsyncClient: ...

    @property
    def issuers(self) -> IssuerDirectory: ...

    @property
    def payments(self) -> PaymentService: ...

    @property
    def read_sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def vault(self) -> Vault: ...

    @property
    def webhooks(self) -> WebhookWorker: ...


# The ``services`` dependency as AdminServices: the container, read through what the admin API uses.
AdminDeps = Annotated[AdminServices, Dependency(skip_validation=True)]


@asynccontextmanager
async def unit(services: AdminServices) -> AsyncIterator[AsyncSession]:
    """One session per admin call, committed only when the operation succeeded."""
    async with unit_of_work(services.sessions) as session:
        yield session
