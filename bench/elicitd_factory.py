"""The elicitd app as the benchmark serves it: ``python -m uvicorn --factory elicitd_factory:create``.

It builds ``Settings`` from ``ELICITD_*`` and the app from ``build_services`` and
``service.app.create_app`` exactly as ``elicitd serve`` does. With ``ELICITD_BENCH_STATS=1`` it adds
two unauthenticated routes; the measured routes are untouched:

* ``GET /_bench/stats``: the in-process waiter count, Redis counters and RSS (what proves 10,000
  requests are really parked in the hub);
* ``GET /_bench/committed/{flow_id}``: when this process's transition of that flow had committed,
  as ``time.perf_counter()`` (CLOCK_MONOTONIC, the same clock in every process of the machine).
  The mark is the ``flow transition`` record ``FlowService.announce`` writes once the commit has
  returned and before it publishes the wake-up, so commit-to-answer includes the publish.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from litestar import Litestar, get

from service.app import create_app
from service.logs import configure_logging
from service.services import Services, build_services
from service.settings import Settings


class CommitMarks(logging.Handler):
    """Remembers when each flow's transition was announced (bounded: the newest 10,000)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.marks: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        flow_id = getattr(record, "flow_id", None)
        if record.msg == "flow transition" and isinstance(flow_id, str):
            if len(self.marks) >= 10_000:
                self.marks.clear()
            self.marks[flow_id] = time.perf_counter()


def bench_routes(services: Services) -> list[Any]:
    hub = services.hub
    marks = CommitMarks()
    logging.getLogger("elicitd.flows").addHandler(marks)

    @get("/_bench/stats", include_in_schema=False, sync_to_thread=False)
    def bench_stats() -> dict[str, Any]:
        with open("/proc/self/status") as status:
            rss_kb = next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
        return {
            "waiters": hub.waiter_count,
            "waited_flows": len(hub._waiters),
            "received": hub.received,
            "published": hub.published,
            "redis_healthy": hub.healthy,
            "pid": os.getpid(),
            "rss_kb": rss_kb,
        }

    @get("/_bench/committed/{flow_id:str}", include_in_schema=False, sync_to_thread=False)
    def committed(flow_id: str) -> dict[str, float | None]:
        return {"at": marks.marks.get(flow_id)}

    return [bench_stats, committed]


def create() -> Litestar:
    settings = Settings.from_env()
    configure_logging(settings)
    services = build_services(settings)
    app = create_app(services)
    if os.environ.get("ELICITD_BENCH_STATS") == "1":
        for route in bench_routes(services):
            app.register(route)
    return app
