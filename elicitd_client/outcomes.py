"""What an elicitd-backed tool gets back: a value, or an exception that says why not.

The "no" outcomes subclass the SDK's ``ToolError``: a tool that does not catch them still answers
a normal ``isError`` tool result whose text the model can read ("The user declined ...") instead
of a crash. A tool that wants a friendlier result catches them.

``InputRequired`` is different: it is not an outcome but "ask the client and retry". It
subclasses ``MCPError`` so it passes through the SDK's tool wrapper untouched; the middleware
installed by ``Elicitd.install`` (or the ``@elicitd.tool`` decorator) turns it into the
``InputRequiredResult`` the tool returns. Should neither be in place, the client sees a clear
JSON-RPC error naming the fix rather than a silently wrong result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp import MCPError
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import INTERNAL_ERROR, InputRequiredResult

from elicitd_client.types import Flow


class InputRequired(MCPError):
    """Carry a ready ``InputRequiredResult`` out of the tool body (2026-07-28 only)."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__(
            INTERNAL_ERROR,
            "elicitd needs client input but the tool cannot return it: call "
            "Elicitd.install(server) or decorate the tool with @elicitd.tool",
        )
        self.result = result


class ElicitationOutcome(ToolError):
    """The elicitation ended without the value the tool asked for."""

    outcome = "unknown"

    def __init__(self, message: str, *, flow: Flow | None = None) -> None:
        super().__init__(message)
        self.flow = flow


class ElicitationDeclined(ElicitationOutcome):
    """The user said no (in the MCP client or on elicitd's page). The flow is ``declined``."""

    outcome = "declined"


class ElicitationCancelled(ElicitationOutcome):
    """The user dismissed the dialog. The flow stays pending: the next call reuses it."""

    outcome = "cancelled"


class ElicitationPending(ElicitationOutcome):
    """The user has not finished in the browser within this call's waiting budget (or the
    client's round cap). The flow stays pending; calling the tool again picks it up."""

    outcome = "pending"


class ElicitationFailed(ElicitationOutcome):
    """The flow failed (a provider error, an expired payment, ...); ``code`` says which."""

    outcome = "failed"

    def __init__(self, message: str, *, code: str, flow: Flow | None = None) -> None:
        super().__init__(message, flow=flow)
        self.code = code


class ElicitdRefused(ElicitationOutcome):
    """elicitd could not take the request at all, so nothing was asked of the user: a feature this
    elicitd does not offer (``payments_unavailable``), a rate limit, a key it refused, or elicitd
    unreachable after the client's retries. ``code`` is elicitd's problem code; the message names it
    so the model (and the person reading along) can tell a missing feature from a passing outage."""

    outcome = "refused"

    def __init__(self, message: str, *, code: str, status: int = 0, flow: Flow | None = None) -> None:
        super().__init__(message, flow=flow)
        self.code = code
        self.status = status


class InvalidInput(ElicitationOutcome):
    """A form's answer kept failing its checks (``reasons``, the last ones) for as many tries as
    the tool allowed. The model reads the reasons; nothing unchecked reached the tool."""

    outcome = "invalid"

    def __init__(self, message: str, reasons: list[str]) -> None:
        super().__init__(message)
        self.reasons = reasons


class SubjectUnavailable(RuntimeError):
    """No verified user for this request: the server has no token verifier, or the token names
    no issuer/subject. A configuration error, never the caller's to fix."""


@dataclass(frozen=True, slots=True)
class Completed:
    """A completed flow: what elicitd stored as its result."""

    kind: str
    result: dict[str, Any]
    flow: Flow | None = field(default=None, repr=False)

    @property
    def flow_id(self) -> str | None:
        return self.flow.id if self.flow is not None and self.flow.id else None


@dataclass(frozen=True, slots=True)
class Consent(Completed):
    """An approved ``consent`` flow. ``receipt`` is elicitd's signed consent receipt (a compact JWS
    anyone can verify against elicitd's ``/.well-known/jwks.json``)."""

    @property
    def receipt(self) -> str | None:
        value = self.result.get("receipt")
        return value if isinstance(value, str) else None

    @property
    def receipt_id(self) -> str | None:
        value = self.result.get("receipt_id")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Payment(Completed):
    """A paid ``payment`` flow."""

    @property
    def payment_id(self) -> str | None:
        value = self.result.get("payment_id") or self.result.get("id")
        return None if value is None else str(value)

    @property
    def amount(self) -> int | None:
        value = self.result.get("amount")
        return value if isinstance(value, int) else None

    @property
    def currency(self) -> str | None:
        value = self.result.get("currency")
        return value if isinstance(value, str) else None

    @property
    def status(self) -> str | None:
        value = self.result.get("status")
        return value if isinstance(value, str) else None
