"""What the grant page and the own page ``/me`` use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

from service.branding.deps import BrandServices

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.connections.service import ConnectionService
    from service.flows.service import FlowService
    from service.grants.service import GrantService
    from service.identity.issuers import IssuerDirectory
    from service.settings import Settings
    from service.signin.gate import BrowserGate


class GrantPageServices(BrandServices, Protocol):
    """The parts of the container the grant page and ``/me`` read (the asking client's brand too)."""

    @property
    def connections(self) -> ConnectionService: ...

    @property
    def flows(self) -> FlowService: ...

    @property
    def gate(self) -> BrowserGate: ...

    @property
    def grants(self) -> GrantService: ...

    @property
    def issuers(self) -> IssuerDirectory: ...

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def settings(self) -> Settings: ...


# The ``services`` dependency as GrantPageServices: the container, read through what this domain uses.
GrantPageDeps = Annotated[GrantPageServices, Dependency(skip_validation=True)]
