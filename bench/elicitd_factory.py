"""The elicitd app as the benchmark serves it: ``python -m uvicorn --factory elicitd_factory:create``.

It builds ``Settings`` from ``ELICITD_*`` and calls ``service.app.create_app`` exactly as
``elicitd serve`` does. With ``ELICITD_BENCH_STATS=1`` it adds one unauthenticated route,
``GET /_bench/stats``, so the benchmark can read the in-process waiter count and Redis counters
(what proves 10,000 requests are really parked in the hub); the measured routes are untouched.
"""

from __future__ import annotations

import os
from typing import Any

from litestar import Litestar, Request, get

from service.app import create_app
from service.logs import configure_logging
from service.services import build_services
from service.settings import Settings


@get("/_bench/stats", include_in_schema=False, sync_to_thread=False)
def bench_stats(request: Request[Any, Any, Any]) -> dict[str, Any]:
    hub = request.app.state.hub
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


def create() -> Litestar:
    settings = Settings.from_env()
    configure_logging(settings)
    app = create_app(build_services(settings))
    if os.environ.get("ELICITD_BENCH_STATS") == "1":
        app.register(bench_stats)
    return app
