"""What the grant page and the own page ``/me`` use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.connections.authorize import ConnectService
    from service.flows.service import FlowService
    from service.grants.service import GrantService
    from service.identity.issuers import IssuerDirectory
    from service.settings import Settings
    from service.signin.gate import BrowserGate


class GrantPageServices(Protocol):
    """The parts of the container the grant page and ``/me`` read."""

    @property
    def connect(self) -> ConnectService: ...

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
