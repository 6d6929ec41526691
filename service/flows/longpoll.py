"""The long-poll's lifecycle: register, read once, park, wait, close, answer.

A status read with ``wait_seconds`` or a resolve with ``accept`` on a pending flow waits for the
flow to finish. The waiter registers *before* the one read that decides the answer (DESIGN §6),
so a change committed after the read wakes it; the request's handler then returns a ``Parked``,
and the HTTP layer (``service.flows.api.LongPollAnswer``) waits on it after the handler's frames
are gone. A parked request holds this object, its waiter and the wait's frames, nothing else: a
process parks thousands.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from service.clock import Clock
from service.flows.repository import FlowFields
from service.flows.states import FlowStatus, is_terminal
from service.signals.bus import Waiter, WaiterHub

Answer = TypeVar("Answer")

# Reads the flow as the hot path does (``FlowService.snapshot``): None when it is gone.
Snapshot = Callable[[uuid.UUID], Awaitable[FlowFields | None]]


class LongPolls:
    """Every long-poll of the process: their deadlines, the wait loop and the stop."""

    __slots__ = ("_clock", "_draining", "_hub", "_max_wait", "_snapshot")

    def __init__(self, *, hub: WaiterHub, clock: Clock, snapshot: Snapshot, max_wait_seconds: float) -> None:
        self._hub = hub
        self._clock = clock
        self._snapshot = snapshot
        self._max_wait = max_wait_seconds
        self._draining = False

    def register(self, flow_id: uuid.UUID) -> Waiter:
        """Registered now; the caller reads the flow next, and closes the waiter unless it hands
        it to a ``Parked`` (whose ``close()`` then does)."""
        return self._hub.register(flow_id)

    def deadline(self, seconds: float) -> float:
        return self._clock.monotonic() + min(seconds, self._max_wait)

    def expired(self, deadline: float) -> bool:
        return deadline <= self._clock.monotonic()

    def parked(
        self, waiter: Waiter, deadline: float, first: FlowFields, finish: Callable[[FlowFields | None], Answer]
    ) -> Parked[Answer]:
        return Parked(self, waiter, deadline, first, finish)

    def drain(self) -> None:
        """The process is stopping: every parked long-poll is answered now, with its flow as it is
        (the client asks again, on another replica), and none parks from here on. Without this a
        stop waits for each long-poll's own deadline, up to ``ELICITD_MAX_WAIT_SECONDS``."""
        self._draining = True
        self._hub.wake_all()

    async def park(self, waiter: Waiter, deadline: float, *, first: FlowFields | None = None) -> FlowFields | None:
        """Until the flow is terminal or the deadline passes; ``waiter`` is registered already.

        The flow is read here (or given as ``first``, read after registering) and dropped before
        every wait: a parked request holds no row, only its waiter.
        """
        flow_id = waiter.flow_id
        flow = first if first is not None else await self._snapshot(flow_id)
        first = None  # this frame lives as long as the wait: it must not keep the row either
        clock = self._clock
        while flow is not None and not is_terminal(FlowStatus(flow.status)) and not self._draining:
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                break
            until_expiry = flow.expires_at.timestamp() - clock.time() + 0.05
            flow = None
            await waiter.wait(max(0.0, min(waiter.tick(remaining), until_expiry)))
            flow = await self._snapshot(flow_id)
        return flow


class Parked(Generic[Answer]):
    """A long-poll (a status read or a resolve) that is registered, has read its pending flow
    once, and has not waited yet.

    The HTTP layer waits on it after the request's handler has returned (``service.flows.api``),
    so what a parked request holds is this object, the waiter and the frames of the wait: not the
    handler's frames, its arguments or the framework's per-request state around them. Used
    exactly once, in this order: await ``wait()``, then ``close()`` (in a ``finally``: it
    unregisters the waiter), then ``answer()`` with what the wait returned.
    """

    __slots__ = ("_deadline", "_finish", "_first", "_polls", "_waiter")

    def __init__(
        self,
        polls: LongPolls,
        waiter: Waiter,
        deadline: float,
        first: FlowFields,
        finish: Callable[[FlowFields | None], Answer],
    ) -> None:
        self._polls = polls
        self._waiter = waiter
        self._deadline = deadline
        self._first: FlowFields | None = first
        self._finish = finish

    def _take_first(self) -> FlowFields | None:
        first, self._first = self._first, None
        return first

    def wait(self) -> Coroutine[Any, Any, FlowFields | None]:
        """The flow once it is terminal, or as it is when the deadline passes (None if it is
        gone). The wait is ``LongPolls.park`` itself, handed back rather than awaited here: no
        frame of this method stays alive under a parked request (~0.3 KB each)."""
        return self._polls.park(self._waiter, self._deadline, first=self._take_first())

    def close(self) -> None:
        self._waiter.close()

    def answer(self, flow: FlowFields | None) -> Answer:
        return self._finish(flow)
