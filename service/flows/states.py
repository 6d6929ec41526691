"""The flow state machine (DESIGN §3), pure: no I/O, so it can be tested exhaustively.

``pending`` is the only non-terminal state. Every other state is final, and a flow makes exactly
one terminal transition; the repository enforces that with ``WHERE status = 'pending'``.
"""

from __future__ import annotations

import enum


class FlowStatus(enum.StrEnum):
    PENDING = "pending"
    COMPLETED = "completed"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    FAILED = "failed"


class Action(enum.StrEnum):
    """What the MCP client answered for the URL elicitation."""

    ACCEPT = "accept"
    DECLINE = "decline"
    CANCEL = "cancel"


class Outcome(enum.StrEnum):
    """What a resolve tells the MCP server to do next."""

    COMPLETED = "completed"
    INPUT_REQUIRED = "input_required"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    FAILED = "failed"


class Actor(enum.StrEnum):
    """Which side caused an event; recorded in ``flow_events.actor``."""

    API = "api"
    MCP_CLIENT = "mcp_client"
    BROWSER = "browser"
    PROVIDER = "provider"
    SWEEPER = "sweeper"
    ADMIN = "admin"


TERMINAL: frozenset[FlowStatus] = frozenset(s for s in FlowStatus if s is not FlowStatus.PENDING)

# Which actors may cause which terminal transition. Anything not listed is refused.
TRANSITIONS: dict[FlowStatus, frozenset[Actor]] = {
    FlowStatus.COMPLETED: frozenset({Actor.API, Actor.BROWSER, Actor.PROVIDER, Actor.ADMIN}),
    FlowStatus.DECLINED: frozenset({Actor.MCP_CLIENT, Actor.BROWSER, Actor.PROVIDER}),
    FlowStatus.CANCELLED: frozenset({Actor.ADMIN, Actor.API}),
    FlowStatus.EXPIRED: frozenset({Actor.SWEEPER, Actor.ADMIN, Actor.API, Actor.PROVIDER}),
    FlowStatus.FAILED: frozenset({Actor.API, Actor.BROWSER, Actor.PROVIDER, Actor.ADMIN}),
}


def is_terminal(status: FlowStatus) -> bool:
    return status in TERMINAL


def can_transition(current: FlowStatus, target: FlowStatus, actor: Actor) -> bool:
    """True when ``actor`` may move a flow from ``current`` to ``target``."""
    if current is not FlowStatus.PENDING or target is FlowStatus.PENDING:
        return False
    return actor in TRANSITIONS[target]


def outcome_for_status(status: FlowStatus) -> Outcome:
    """A terminal status maps one-to-one onto an outcome; a pending one needs more input."""
    if status is FlowStatus.PENDING:
        return Outcome.INPUT_REQUIRED
    return Outcome(status.value)


def status_for_action(action: Action) -> FlowStatus | None:
    """The transition a client action causes. ``cancel`` only dismissed the dialog: no transition,
    the flow stays pending so the next call reuses it. ``accept`` means only "the user opened it"."""
    if action is Action.DECLINE:
        return FlowStatus.DECLINED
    return None


def outcome_for_action(action: Action, status: FlowStatus) -> Outcome:
    """The outcome of one resolve round, given the client's action and the flow's status after it."""
    if is_terminal(status):
        return outcome_for_status(status)
    if action is Action.CANCEL:
        return Outcome.CANCELLED
    if action is Action.DECLINE:
        # The decline transition lost a race (e.g. completion first); status decides above.
        return Outcome.DECLINED
    return Outcome.INPUT_REQUIRED
