"""What the event stream's handler uses of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.events.hub import EventHub
    from service.identity.keys import ApiKeyAuthenticator


class EventServices(Protocol):
    """The parts of the container ``GET /v1/events`` reads: the hub, and the keys it re-checks."""

    @property
    def authenticator(self) -> ApiKeyAuthenticator: ...

    @property
    def events(self) -> EventHub: ...


# The ``services`` dependency as EventServices: the container, read through what this domain uses.
EventDeps = Annotated[EventServices, Dependency(skip_validation=True)]
