"""What a flow kind brings: one ``KindPlugin`` value per kind.

A kind is defined by its package (``service/<kind>/plugin.py``) and registered by name in
``service.kinds``; everything that lists kinds — the API schema's allowed values, the database's
check constraint, the page dispatch of ``GET /f/{id}``, the create-time handlers — is derived from
those plugins, so adding a kind is a change to one package plus its registry line (and the
migration the drift test then asks for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from litestar import Request, Response

from service.flows.kinds import KindHandler
from service.flows.models import Flow


class KindPage(Protocol):
    """The page of a pending flow of this kind (after ``GET /f/{id}`` found it pending).

    ``services`` is the container; each kind reads it through its own ``deps`` Protocol, and the
    composition root (``service.services``) has mypy check that the container satisfies them all."""

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
