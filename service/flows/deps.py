"""What the flow API, the flow entry page and the hot path use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from collections.abc import Mapping

    from service.flows.plugins import MountedKind
    from service.flows.service import FlowService
    from service.identity.keys import ApiKeyAuthenticator
    from service.identity.subject_proof import SubjectProver
    from service.settings import Settings


class FlowApiServices(Protocol):
    """The parts of the container ``/v1/flows`` reads: the flows, and the subject proof."""

    @property
    def flows(self) -> FlowService: ...

    @property
    def subjects(self) -> SubjectProver: ...


# The ``services`` dependency as FlowApiServices: the container, read through what this domain uses.
FlowApiDeps = Annotated[FlowApiServices, Dependency(skip_validation=True)]


class FlowPageServices(Protocol):
    """The parts of the container ``GET /f/{id}`` reads before a kind's page takes over."""

    @property
    def flows(self) -> FlowService: ...

    @property
    def kinds(self) -> Mapping[str, MountedKind]: ...


# The ``services`` dependency as FlowPageServices: the container, read through what this domain uses.
FlowPageDeps = Annotated[FlowPageServices, Dependency(skip_validation=True)]


class HotFlowServices(Protocol):
    """The parts of the container the hot path reads."""

    @property
    def authenticator(self) -> ApiKeyAuthenticator: ...

    @property
    def flows(self) -> FlowService: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def subjects(self) -> SubjectProver: ...


# The ``services`` dependency as HotFlowServices: the container, read through what this domain uses.
HotFlowDeps = Annotated[HotFlowServices, Dependency(skip_validation=True)]
