"""The signal bus warns when Redis goes away, and only then: a clean stop is silent."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from service.embedded import EmbeddedRedis
from service.signals.bus import WaiterHub
from tests.support import backends
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]


async def _nothing_finished(ids: list[uuid.UUID]) -> Iterable[uuid.UUID]:
    return []


def _hub(redis_url: str) -> WaiterHub:
    return WaiterHub(
        redis_url=redis_url,
        channel=f"elicitd:test:{uuid.uuid4().hex[:8]}",
        poll_interval=0.5,
        safety_poll_interval=30,
        finished=_nothing_finished,
    )


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@pytest.fixture
def bus_log() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("elicitd.signals")
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


async def test_a_clean_stop_logs_no_warning(backend: backends.Backends, bus_log: Records) -> None:
    hub = _hub(backend.redis_url)
    await hub.start()
    await until(lambda: hub.healthy, what="the bus connected")
    await hub.stop()
    assert bus_log.at(logging.WARNING) == []
    assert [r.getMessage() for r in bus_log.records] == ["redis signal bus connected", "redis signal bus closed"]


async def test_losing_redis_is_a_warning(bus_log: Records) -> None:
    data = ROOT / ".data" / "test" / f"bus-{uuid.uuid4().hex[:8]}"
    redis = EmbeddedRedis(data).start()
    hub = _hub(redis.url)
    try:
        await hub.start()
        await until(lambda: hub.healthy, what="the bus connected")
        redis.stop()
        await until(lambda: not hub.healthy, what="the bus seen to drop")
    finally:
        redis.stop()
        await hub.stop()
        shutil.rmtree(data, ignore_errors=True)
    assert bus_log.at(logging.WARNING) == ["redis signal bus unavailable: waiters poll PostgreSQL"]
