"""What a flow kind brings: one ``KindPlugin`` value per kind.

A kind is defined by its package (``service/<kind>/plugin.py``) and registered by name in
``service.kinds``; everything that lists kinds — the API schema's allowed values, the database's
check constraint, the page dispatch of ``GET /f/{id}``, the create-time handlers — is derived from
those plugins, so adding a kind is a change to one package plus its registry line (and the
migration the drift test then asks for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from litestar import Request, Response

from service.flows.kinds import KindHandler
from service.flows.models import Flow


class KindPage(Protocol):
    """The page of a pending flow of this kind (after ``GET /f/{id}`` found it pending).

    ``services`` is what the kind's own ``services`` factory built; the kind reads it through its
    own ``deps`` Protocol, which the factory's return annotation has mypy check."""

    async def __call__(self, request: Request[Any, Any, Any], flow: Flow, services: Any, /) -> Response[Any]: ...


@dataclass(frozen=True, slots=True)
class KindPlugin:
    name: str
    # Create-time validation, normalization and the "already satisfied" check.
    handler: KindHandler
    # The browser page for a pending flow; None for kinds whose page is elsewhere (``external``).
    page: KindPage | None = None
    # Routes the kind adds (form POSTs, callbacks, provider webhooks, public keys).
    routes: tuple[Any, ...] = ()
    # The tables the kind writes besides ``flows`` (for operators: what a kind keeps).
    stores: tuple[str, ...] = ()
    # Builds, once at start-up, what the kind's page and routes receive as ``services``, from the
    # composition root's ``service.kind_context.KindContext`` (named ``Any`` here: it sits above
    # flows); each kind annotates its factory with the context and its own ``deps`` Protocol.
    services: Callable[[Any], object] | None = None
    # Builds, once at start-up and from the same context, the kind's health probe of the
    # connections it stores on their own row (``service.connections.key_probes.KeyProbes``: the
    # api_key kind's stored keys), or None; the composition root hands it to the probe pass.
    probes: Callable[[Any], object] | None = None


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MountedKind:
    """A kind as the running service holds it: its plugin and the services its factory built."""

    plugin: KindPlugin
    services: object = None
    probes: object = None

    def serves(self, of: type[T]) -> T:
        """The kind's services as the type its package built them as (a command, a test)."""
        if not isinstance(self.services, of):
            raise TypeError(f"the {self.plugin.name} kind's services are not a {of.__name__}")
        return self.services
