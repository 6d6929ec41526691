"""What the payment pages and the provider's webhook use of the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from litestar.params import Dependency

if TYPE_CHECKING:
    from service.flows.service import FlowService
    from service.payments.service import PaymentService
    from service.signin.gate import BrowserGate


class PaymentServices(Protocol):
    """The parts of the kind's services the payment pages read."""

    @property
    def flows(self) -> FlowService: ...

    @property
    def gate(self) -> BrowserGate: ...

    @property
    def payments(self) -> PaymentService: ...


# The ``services`` dependency as PaymentServices: what the kind's plugin built,
# read through what its handlers use.
PaymentDeps = Annotated[PaymentServices, Dependency(skip_validation=True)]


class PaymentWebhookServices(Protocol):
    """The part of the kind's services the provider's webhook reads."""

    @property
    def payments(self) -> PaymentService: ...


# The ``services`` dependency as PaymentWebhookServices: what the kind's plugin built,
# read through what its handlers use.
PaymentWebhookDeps = Annotated[PaymentWebhookServices, Dependency(skip_validation=True)]
