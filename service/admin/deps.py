"""What admin handlers share: the parts of the services they use, and one unit of work per call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Concatenate, ParamSpec, Protocol, TypeVar

from litestar.params import Dependency
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.tokens import Role
from service.db.unit import unit_of_work

if TYPE_CHECKING:
    import httpx
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.connections.service import ConnectionService
    from service.crypto.vault import Vault
    from service.flows.plugins import MountedKind
    from service.flows.service import FlowService
    from service.identity.issuers import IssuerDirectory
    from service.identity.keys import ApiKeyAuthenticator
    from service.signals.webhooks import WebhookWorker


P = ParamSpec("P")
T = TypeVar("T")

# A route's ``opt``: the least role it needs (guards.py); a route without one needs viewer.
OPERATOR = {"role": Role.OPERATOR}
ADMIN = {"role": Role.ADMIN}


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
    def kinds(self) -> Mapping[str, MountedKind]: ...

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


async def in_unit(
    services: AdminServices,
    operation: Callable[Concatenate[AsyncSession, P], Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``operation(session, *args, **kwargs)`` in one unit of work: what it returns, once committed."""
    async with unit(services) as session:
        return await operation(session, *args, **kwargs)
