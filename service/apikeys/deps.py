"""What the API-key pages use of the services: sign-in and the API-key service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

from service.grants.deps import GrantPageServices

if TYPE_CHECKING:
    from service.apikeys.service import ApiKeyService


class ApiKeyServices(GrantPageServices, Protocol):
    """The parts of the kind's services the API-key form and its POST read, the grant page's included
    (it may show it)."""

    @property
    def apikeys(self) -> ApiKeyService: ...


# The ``services`` dependency as ApiKeyServices: what the kind's plugin built,
# read through what its handlers use.
ApiKeyDeps = Annotated[ApiKeyServices, Dependency(skip_validation=True)]
