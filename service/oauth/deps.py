"""What the token exchange's handlers use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.oauth.exchange import TokenExchange


class ExchangeServices(Protocol):
    """The parts of the container the token endpoint and its metadata read."""

    @property
    def exchange(self) -> TokenExchange: ...


# The ``services`` dependency as ExchangeServices: the container, read through what this domain uses.
ExchangeDeps = Annotated[ExchangeServices, Dependency(skip_validation=True)]
