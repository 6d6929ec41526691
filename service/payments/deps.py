"""What the payment pages and the provider's webhook use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.flows.service import FlowService
    from service.payments.service import PaymentService
    from service.signin.gate import BrowserGate


class PaymentServices(Protocol):
    """The parts of the container the payment pages read."""

    @property
    def flows(self) -> FlowService: ...

    @property
    def gate(self) -> BrowserGate: ...

    @property
    def payments(self) -> PaymentService: ...


# The ``services`` dependency as PaymentServices: the container, read through what this domain uses.
PaymentDeps = Annotated[PaymentServices, Dependency(skip_validation=True)]


class PaymentWebhookServices(Protocol):
    """The part of the container the provider's webhook reads."""

    @property
    def payments(self) -> PaymentService: ...


# The ``services`` dependency as PaymentWebhookServices: the container, read through what this domain uses.
PaymentWebhookDeps = Annotated[PaymentWebhookServices, Dependency(skip_validation=True)]
