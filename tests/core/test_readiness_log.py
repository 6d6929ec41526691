"""``/readyz`` answers only up or down; the server log says why, once per change, with no secret."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from service.embedded import EmbeddedRedis, free_port
from service.health import DependencyLog
from service.settings import Settings
from tests.support.apps import LogCapture, running_app
from tests.support.waiting import until

DB_PASSWORD = "MARK-DB-PW-5e1c"
REDIS_PASSWORD = "MARK-REDIS-PW-a7d2"


@pytest.fixture
def capture() -> Iterator[LogCapture]:
    capture = LogCapture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(level)


def health_lines(capture: LogCapture) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in capture.lines]
    for line in lines:
        line.pop("ts")
    return [line for line in lines if line["logger"] == "elicitd.health"]


def test_only_changes_are_logged(capture: LogCapture) -> None:
    log = DependencyLog()
    log.up("postgres")  # up from the start: nothing to say
    for _ in range(5):
        log.down("redis", "ConnectionError")
    log.down("redis", "TimeoutError")  # a new reason is news
    log.down("redis", "TimeoutError")
    log.up("redis")
    log.up("redis")
    log.down("redis", "TimeoutError")  # down again after being back: news again
    down = {"level": "warning", "logger": "elicitd.health", "msg": "dependency down", "dependency": "redis"}
    assert health_lines(capture) == [
        {**down, "reason": "ConnectionError"},
        {**down, "reason": "TimeoutError"},
        {"level": "info", "logger": "elicitd.health", "msg": "dependency back", "dependency": "redis"},
        {**down, "reason": "TimeoutError"},
    ]


async def test_down_dependencies_are_logged_once_with_why_and_no_secret(
    make_settings: Callable[..., Settings], capture: LogCapture
) -> None:
    base = make_settings()
    missing_database = (
        make_url(base.database_url)
        .set(database=f"elicitd_missing_{uuid.uuid4().hex[:8]}", password=DB_PASSWORD)
        .render_as_string(hide_password=False)
    )
    dead_redis = f"redis://default:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0"
    settings = make_settings(database_url=missing_database, redis_url=dead_redis, background_tasks=False)
    async with running_app(settings) as app, app.http() as http:
        for _ in range(5):
            response = await http.get("/readyz")
            assert response.status_code == 503
            assert response.json() == {
                "status": "unavailable",
                "postgres": "down",
                "redis": "down",
                "wakeups": "polling",
            }
    lines = health_lines(capture)
    postgres, redis = sorted(lines, key=lambda line: str(line["dependency"]))
    stack = postgres.pop("traceback")
    assert postgres == {
        "level": "warning",
        "logger": "elicitd.health",
        "msg": "dependency down",
        "dependency": "postgres",
        "reason": "DBAPIError/Error (sqlstate 3D000)",
        "error_type": "DBAPIError",
    }
    assert "(sqlstate 3D000)" in stack
    assert redis == {
        "level": "warning",
        "logger": "elicitd.health",
        "msg": "dependency down",
        "dependency": "redis",
        "reason": "ConnectionError",
    }
    for line in capture.lines:
        assert DB_PASSWORD not in line
        assert REDIS_PASSWORD not in line


async def test_a_dependency_coming_back_is_logged_once(
    make_settings: Callable[..., Settings], capture: LogCapture, tmp_path: Path
) -> None:
    redis = EmbeddedRedis(tmp_path / "redis").start()
    try:
        settings = make_settings(redis_url=redis.url, background_tasks=False)
        async with running_app(settings) as app, app.http() as http:

            async def redis_is(state: str) -> bool:
                return bool((await http.get("/readyz")).json()["redis"] == state)

            assert await redis_is("ok")
            redis.stop()
            # The subscription notices and reconnects on its own; readiness reports what it knows.
            await until(lambda: redis_is("down"), what="readiness reporting Redis down")
            for _ in range(3):
                assert await redis_is("down")
            redis = EmbeddedRedis(tmp_path / "redis", port=redis.port).start()
            await until(lambda: redis_is("ok"), what="readiness reporting Redis back")
            for _ in range(3):
                assert await redis_is("ok")
    finally:
        redis.stop()
    lines = health_lines(capture)
    assert [(line["msg"], line["dependency"]) for line in lines] == [
        ("dependency down", "redis"),
        ("dependency back", "redis"),
    ]
