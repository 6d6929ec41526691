"""Background work that competes with live requests works only a share of the time it runs.

The expiry sweep and retention both take a batch, then rest in proportion to how long the batch
took. The rest is real time (``asyncio.sleep`` by default), never a service's clock: it makes room
on the CPU and in the database for requests, which a test's clock cannot speed up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Rest = Callable[[float], Awaitable[None]]


def rest_after(busy_seconds: float, share: float) -> float:
    """How long to rest after ``busy_seconds`` of work so that work is ``share`` of the time."""
    return busy_seconds * (1 - share) / share
