"""What the brand asset routes and the branded pages use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.branding.service import BrandService


class BrandServices(Protocol):
    @property
    def brands(self) -> BrandService: ...


BrandDeps = Annotated[BrandServices, Dependency(skip_validation=True)]
