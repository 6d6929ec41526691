"""What consent's handlers use of the services: sign-in and the consent service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.consent.service import ConsentService
    from service.signin.gate import BrowserGate


class ConsentServices(Protocol):
    """The parts of the kind's services consent's page, decision and key set read."""

    @property
    def consent(self) -> ConsentService: ...

    @property
    def gate(self) -> BrowserGate: ...


# The ``services`` dependency as ConsentServices: what the kind's plugin built,
# read through what its handlers use.
ConsentDeps = Annotated[ConsentServices, Dependency(skip_validation=True)]
