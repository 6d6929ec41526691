"""What console handlers share: the services they use, and the ``operator`` dependency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

from service.admin.deps import AdminServices

if TYPE_CHECKING:
    from service.console.signin import ConsoleSignIn
    from service.grants.service import GrantService
    from service.observability.metrics import Metrics
    from service.settings import Settings
    from service.signals.bus import WaiterHub


class ConsoleServices(AdminServices, Protocol):
    """The parts of the container console pages use: the admin API's (a console action calls the
    same service functions as the matching API handler), the console's sign-in, and settings."""

    @property
    def console(self) -> ConsoleSignIn: ...

    @property
    def grants(self) -> GrantService: ...

    @property
    def hub(self) -> WaiterHub: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def settings(self) -> Settings: ...


# The ``services`` dependency as ConsoleServices.
ConsoleDeps = Annotated[ConsoleServices, Dependency(skip_validation=True)]
