"""What the connection API and the connect pages use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

from service.grants.deps import GrantPageServices

if TYPE_CHECKING:
    from service.connections.service import ConnectionService
    from service.identity.subject_proof import SubjectProver


class ConnectionApiServices(Protocol):
    """The parts of the container ``/v1/connections`` reads: connections, and the subject proof."""

    @property
    def connections(self) -> ConnectionService: ...

    @property
    def subjects(self) -> SubjectProver: ...


# The ``services`` dependency as ConnectionApiServices: the container, read through what this domain uses.
ConnectionApiDeps = Annotated[ConnectionApiServices, Dependency(skip_validation=True)]


class ConnectPageServices(GrantPageServices, Protocol):
    """The parts of the container the connect pages and the callback read, the grant page's included
    (it may show it)."""


# The ``services`` dependency as ConnectPageServices: the container, read through what this domain uses.
ConnectPageDeps = Annotated[ConnectPageServices, Dependency(skip_validation=True)]
