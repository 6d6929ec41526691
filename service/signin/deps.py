"""What the sign-in routes use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.settings import Settings
    from service.signin.gate import BrowserGate
    from service.signin.service import LoginService


class SigninServices(Protocol):
    """The parts of the container the ``/auth`` routes read."""

    @property
    def gate(self) -> BrowserGate: ...

    @property
    def logins(self) -> LoginService: ...

    @property
    def settings(self) -> Settings: ...


# The ``services`` dependency as SigninServices: the container, read through what this domain uses.
SigninDeps = Annotated[SigninServices, Dependency(skip_validation=True)]
