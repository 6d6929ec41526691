"""Waiting in tests for something that *will* happen, without guessing how long it takes."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

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
