"""What the connection API uses of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

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
