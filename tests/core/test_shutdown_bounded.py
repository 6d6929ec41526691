"""A stop ends: a shutdown step that ignores its cancellation is abandoned at its deadline, named
in a warning, and the steps after it still run."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from service.services import bounded


async def _stubborn(started: asyncio.Event, release: asyncio.Event, ended: asyncio.Event) -> None:
    """Ignores every cancellation until the test releases it (a task left pending would hold up the
    close of the test session's event loop, which cancels and awaits every task still running)."""
    started.set()
    try:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
    finally:
        ended.set()


async def test_a_stubborn_step_is_abandoned_at_its_deadline(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    started, release, ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ran_after: list[str] = []

    async def next_step() -> None:
        ran_after.append("next")

    with caplog.at_level(logging.WARNING, logger="elicitd"):
        began = loop.time()
        await bounded("stubborn", _stubborn(started, release, ended), began + 0.3)
        await bounded("next", next_step(), began + 0.3)
        took = loop.time() - began
    assert started.is_set()
    assert not ended.is_set()  # abandoned, not waited for: it is still running
    release.set()
    await asyncio.wait_for(ended.wait(), 5)
    assert 0.3 <= took < 1.0
    assert ran_after == ["next"]
    assert [(r.getMessage(), getattr(r, "dependency", None)) for r in caplog.records] == [
        ("shutdown step abandoned", "stubborn")
    ]


async def test_a_failing_step_is_named_and_the_stop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise OSError("gone")

    with caplog.at_level(logging.WARNING, logger="elicitd"):
        await bounded("postgres", broken(), asyncio.get_running_loop().time() + 1)
    assert [
        (r.getMessage(), getattr(r, "dependency", None), getattr(r, "error_type", None)) for r in caplog.records
    ] == [("shutdown step failed", "postgres", "OSError")]
