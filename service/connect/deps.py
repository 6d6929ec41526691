"""What the connect pages and the callback use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

from service.branding.deps import BrandServices
from service.grants.deps import GrantPageServices

if TYPE_CHECKING:
    from service.connect.authorize import ConnectService


class ConnectPageServices(GrantPageServices, BrandServices, Protocol):
    """The parts of the kind's services the connect pages and the callback read, the grant page's
    included (it may show it), and the asking client's brand."""

    @property
    def connect(self) -> ConnectService: ...


# The ``services`` dependency as ConnectPageServices: what the kind's plugin built,
# read through what its handlers use.
ConnectPageDeps = Annotated[ConnectPageServices, Dependency(skip_validation=True)]
