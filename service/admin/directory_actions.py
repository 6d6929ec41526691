"""What the admin API and the console run to change a provider or an issuer.

Each is one unit of work over ``service.admin.directory``, then this process's cached discovery
metadata for it dropped, so the next connect or sign-in here reads the change. The CLI runs the
same ``directory`` functions in its own process (whose cache it does not share).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.admin.deps import in_unit
from service.admin.directory import (
    CreateIssuer,
    CreateProvider,
    IssuerView,
    ProviderView,
    UpdateIssuer,
    UpdateProvider,
    create_issuer,
    create_provider,
    set_issuer_enabled,
    set_provider_enabled,
    update_issuer,
    update_provider,
)

if TYPE_CHECKING:
    from service.admin.deps import AdminServices


async def add_provider(services: AdminServices, data: CreateProvider) -> ProviderView:
    view = await in_unit(services, create_provider, services.vault, data)
    services.connections.metadata.forget()
    return view


async def change_provider(services: AdminServices, name: str, data: UpdateProvider) -> ProviderView:
    view = await in_unit(services, update_provider, services.vault, name, data)
    services.connections.metadata.forget()
    return view


async def switch_provider(services: AdminServices, name: str, enabled: bool) -> ProviderView:
    return await in_unit(services, set_provider_enabled, name, enabled)


async def add_issuer(services: AdminServices, data: CreateIssuer) -> IssuerView:
    view = await in_unit(services, create_issuer, services.vault, data)
    services.issuers.forget(view.issuer)
    return view


async def change_issuer(services: AdminServices, data: UpdateIssuer) -> IssuerView:
    view = await in_unit(services, update_issuer, services.vault, data)
    services.issuers.forget(view.issuer)
    return view


async def switch_issuer(services: AdminServices, issuer: str, enabled: bool) -> IssuerView:
    return await in_unit(services, set_issuer_enabled, issuer, enabled)
