"""Waiting in tests for something that *will* happen, without guessing how long it takes."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from service.db.base import FLOW_ID
from tests.support.apps import RunningApp

POLL_SECONDS = 0.01


async def until(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0, what: str = "the condition"
) -> None:
    """Return as soon as ``condition()`` holds (it may be a coroutine function); fail after ``timeout``.

    Only for "this eventually happens": the deadline bounds a hang, it is never what the test
    measures. To prove that something does *not* happen, order it after an event or move a
    ``ManualClock`` instead."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(POLL_SECONDS)  # the poll interval; what is awaited is the condition


async def parked(app: RunningApp, flow_ref: str, *, count: int = 1, timeout: float = 10.0) -> None:
    """Return once ``count`` requests of ``app`` wait on the flow (registered with its waiter hub).

    From then on such a request ends only when it is woken or its own time is up, so a test can
    assert that it has not answered yet, and know that what it does next happens during the wait."""
    flow_id = FLOW_ID.parse(flow_ref)
    assert flow_id is not None, flow_ref
    hub = app.services.hub
    await until(lambda: hub.waiters_on(flow_id) >= count, timeout=timeout, what=f"a request waiting on {flow_ref}")
