"""With PostgreSQL unreachable, the background loops say so once, naming the database, and then
once a minute with a count, instead of a warning per round (about one a second between them)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from service.logs import DATABASE_LOOPS, DatabaseOutage, JsonFormatter, configure_logging, database_label
from service.settings import KeyRing, Settings
from tests.support.apps import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_warning_then_a_summary_per_interval_then_a_new_outage() -> None:
    clock = Clock()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    outage = DatabaseOutage("127.0.0.1:5999/elicitd", summary_seconds=60, clock=clock)
    loggers = [logging.getLogger(name) for name in ("elicitd.test.sweeper", "elicitd.test.webhooks")]
    for logger in loggers:
        logger.addFilter(outage)
        logger.addHandler(handler)
        logger.propagate = False
    try:
        for second in range(125):  # two loops failing every second for two minutes
            clock.now = 1000.0 + second
            for logger in loggers:
                logger.warning("round failed", extra={"error_type": "ConnectionRefusedError"})
        loggers[0].warning("round failed", extra={"error_type": "KeyError"})  # not an outage: as it is
        clock.now += 121  # quiet for more than two intervals: the next failure is a new outage
        loggers[1].warning("round failed", extra={"error_type": "TimeoutError"})
    finally:
        for logger in loggers:
            logger.removeFilter(outage)
            logger.removeHandler(handler)
            logger.propagate = True
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    first = "database unreachable: background work retries, a summary follows every 60 s"
    assert [(line["logger"], line["msg"], line.get("count"), line.get("seconds")) for line in lines] == [
        ("elicitd.test.sweeper", first, None, None),
        ("elicitd.test.sweeper", "database still unreachable", 120, 60),
        ("elicitd.test.sweeper", "database still unreachable", 120, 120),
        ("elicitd.test.sweeper", "round failed", None, None),
        ("elicitd.test.webhooks", first, None, None),
    ]
    assert {line.get("database") for line in lines if line["msg"] != "round failed"} == {"127.0.0.1:5999/elicitd"}


def test_the_label_names_host_port_and_database_never_the_password() -> None:
    assert database_label("postgresql://postgres:hunter2@db.internal:5433/elicitd") == "db.internal:5433/elicitd"
    assert database_label("postgresql://postgres@/elicitd?host=/run/postgresql") == "/run/postgresql/elicitd"


def test_configure_logging_puts_one_filter_on_every_loop_however_often_it_runs() -> None:
    settings = Settings.from_env(
        {
            "ELICITD_DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:5999/elicitd",
            "ELICITD_KEYS": KeyRing.generate_entry("k1"),
            "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        }
    )
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging(settings, stream=io.StringIO())
        configure_logging(settings, stream=io.StringIO())
        filters = [
            [f for f in logging.getLogger(name).filters if isinstance(f, DatabaseOutage)] for name in DATABASE_LOOPS
        ]
        assert [len(found) for found in filters] == [1] * len(DATABASE_LOOPS)
        assert len({id(found[0]) for found in filters}) == 1
        assert filters[0][0].database == "127.0.0.1:5999/elicitd"
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


def test_a_redis_timeout_is_not_told_as_a_database_outage() -> None:
    """The signal bus logs the PostgreSQL poll on ``elicitd.signals`` (folded in an outage) and
    Redis's own troubles on ``elicitd.signals.redis``: a paused Redis's publish timeout keeps its
    own words whatever the database is doing."""
    from service.signals import bus

    settings = Settings.from_env(
        {
            "ELICITD_DATABASE_URL": "postgresql://postgres@127.0.0.1:5999/elicitd",
            "ELICITD_KEYS": KeyRing.generate_entry("k1"),
            "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        }
    )
    out = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging(settings, stream=out)
        bus.redis_logger.warning("publish failed; waiters elsewhere will poll", extra={"error_type": "TimeoutError"})
        bus.logger.warning("waiter poll failed", extra={"error_type": "TimeoutError"})
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["logger"], line["msg"]) for line in lines] == [
        ("elicitd.signals.redis", "publish failed; waiters elsewhere will poll"),
        ("elicitd.signals", "database unreachable: background work retries, a summary follows every 60 s"),
    ]


def test_serve_with_postgresql_down_says_so_once_naming_it(tmp_path: Path) -> None:
    port, listen = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": f"postgresql://postgres:hunter2@127.0.0.1:{port}/elicitd",
            "ELICITD_PUBLIC_URL": f"http://127.0.0.1:{listen}",
            "ELICITD_KEYS": KeyRing.generate_entry("k1"),
            "ELICITD_REDIS_URL": os.environ.get("ELICITD_TEST_REDIS_URL", ""),
        }
    )
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(listen)],
            env=env,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 60
        while "database unreachable" not in log.read_text() and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            time.sleep(0.1)
        time.sleep(3)  # more rounds of every loop: the sweeper, retention, webhooks, the event tail
    finally:
        server.terminate()
        server.wait(30)
    err = log.read_text()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    warnings = [line for line in lines if line["level"] == "warning" and line["logger"] != "elicitd.signals"]
    assert [(line["msg"], line.get("database")) for line in warnings] == [
        ("database unreachable: background work retries, a summary follows every 60 s", f"127.0.0.1:{port}/elicitd")
    ], err
    assert "hunter2" not in err
