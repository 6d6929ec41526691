"""The state machine, checked over every (status, target, actor) combination."""

from __future__ import annotations

import itertools

import pytest

from service.flows.states import (
    TERMINAL,
    TRANSITIONS,
    Action,
    Actor,
    FlowStatus,
    Outcome,
    can_transition,
    is_terminal,
    outcome_for_action,
    outcome_for_status,
    status_for_action,
)

ALLOWED = {
    (FlowStatus.COMPLETED, Actor.API),
    (FlowStatus.COMPLETED, Actor.BROWSER),
    (FlowStatus.COMPLETED, Actor.PROVIDER),
    (FlowStatus.COMPLETED, Actor.ADMIN),
    (FlowStatus.DECLINED, Actor.MCP_CLIENT),
    (FlowStatus.DECLINED, Actor.BROWSER),
    (FlowStatus.DECLINED, Actor.PROVIDER),
    (FlowStatus.CANCELLED, Actor.ADMIN),
    (FlowStatus.CANCELLED, Actor.API),
    (FlowStatus.EXPIRED, Actor.SWEEPER),
    (FlowStatus.EXPIRED, Actor.ADMIN),
    (FlowStatus.EXPIRED, Actor.API),
    (FlowStatus.EXPIRED, Actor.PROVIDER),
    (FlowStatus.FAILED, Actor.API),
    (FlowStatus.FAILED, Actor.BROWSER),
    (FlowStatus.FAILED, Actor.PROVIDER),
    (FlowStatus.FAILED, Actor.ADMIN),
}


@pytest.mark.parametrize(("current", "target", "actor"), list(itertools.product(FlowStatus, FlowStatus, Actor)))
def test_every_transition(current: FlowStatus, target: FlowStatus, actor: Actor) -> None:
    expected = current is FlowStatus.PENDING and (target, actor) in ALLOWED
    assert can_transition(current, target, actor) is expected


def test_terminal_states_are_all_but_pending() -> None:
    assert frozenset(FlowStatus) - TERMINAL == {FlowStatus.PENDING}
    assert not is_terminal(FlowStatus.PENDING)
    assert all(is_terminal(s) for s in TERMINAL)
    assert set(TRANSITIONS) == set(TERMINAL)


def test_outcome_for_status() -> None:
    assert outcome_for_status(FlowStatus.PENDING) is Outcome.INPUT_REQUIRED
    for status in TERMINAL:
        assert outcome_for_status(status).value == status.value


def test_status_for_action() -> None:
    assert status_for_action(Action.DECLINE) is FlowStatus.DECLINED
    assert status_for_action(Action.CANCEL) is None  # the flow stays pending, to be reused
    assert status_for_action(Action.ACCEPT) is None  # accept only means "the user opened it"


@pytest.mark.parametrize(
    ("action", "status", "outcome"),
    [
        (Action.ACCEPT, FlowStatus.PENDING, Outcome.INPUT_REQUIRED),
        (Action.CANCEL, FlowStatus.PENDING, Outcome.CANCELLED),
        (Action.DECLINE, FlowStatus.PENDING, Outcome.DECLINED),
        *[(a, s, Outcome(s.value)) for a in Action for s in TERMINAL],
    ],
)
def test_outcome_for_action(action: Action, status: FlowStatus, outcome: Outcome) -> None:
    assert outcome_for_action(action, status) is outcome


@pytest.mark.parametrize(("target", "actor"), list(itertools.product(FlowStatus, Actor)))
def test_the_repository_accepts_exactly_the_table(target: FlowStatus, actor: Actor) -> None:
    """Transitions are built from the same table: a disallowed one cannot even be expressed."""
    from service.flows.repository import Transition

    if (target, actor) in ALLOWED:
        assert Transition(target, actor).to is target
    else:
        with pytest.raises(ValueError, match="may not move a flow"):
            Transition(target, actor)
