"""How uvicorn serves elicitd: uvloop and httptools when they are installed, asyncio and h11 if not.

uvloop's transports and httptools' C parser replace uvicorn's pure-Python connection state
(h11's per-connection state machine, asyncio's selector transport), which is most of what a
parked long-poll costs in memory and a visible share of every request's CPU. Both are pinned
dependencies; the fallback keeps a source checkout without compiled wheels working.
"""

from __future__ import annotations

import gc
import importlib.util
import socket
import sys
from collections.abc import Callable
from typing import Any, TypedDict

import uvicorn

_heap_frozen = False


class ServerImpl(TypedDict):
    loop: str
    http: str


def uvicorn_options() -> ServerImpl:
    """``loop`` and ``http`` for ``uvicorn.run`` / ``uvicorn.Config`` (and the ``--loop``/``--http`` flags)."""
    fast_loop = importlib.util.find_spec("uvloop") is not None
    fast_http = importlib.util.find_spec("httptools") is not None
    return {"loop": "uvloop" if fast_loop else "asyncio", "http": "httptools" if fast_http else "h11"}


def server_options() -> dict[str, Any]:
    """``uvicorn_options()`` with the request-head bounds (``service.request_head``): the keyword
    arguments every in-process ``uvicorn.run`` / ``uvicorn.Config`` of elicitd takes."""
    from service.request_head import uvicorn_http_options

    options = uvicorn_options()
    return {"loop": options["loop"], **uvicorn_http_options(options["http"])}


# After SIGTERM uvicorn stops accepting and waits for the requests it holds; this is how long at
# most. ``DrainingServer`` answers parked long-polls and ends event streams at once, so the bound
# is for what the drain cannot reach: no request waits longer than ELICITD_MAX_WAIT_SECONDS, and
# the margin lets its answer be written. Without a bound one open event stream held the stop until
# the process was killed (measured: still running 20 s after SIGTERM); past it, what still runs is
# cancelled.
DRAIN_MARGIN_SECONDS = 2


def drain_seconds(max_wait_seconds: int) -> int:
    """uvicorn's ``timeout_graceful_shutdown`` for a replica whose long-polls wait ``max_wait_seconds``."""
    return max_wait_seconds + DRAIN_MARGIN_SECONDS


class DrainingServer(uvicorn.Server):
    """uvicorn's server, telling the app when the stop begins: ``drain`` runs as soon as SIGTERM
    (or Ctrl-C) has closed the listening socket, before uvicorn waits for open requests, so parked
    long-polls are answered and event streams end at once instead of holding the stop until their
    deadline or ``timeout_graceful_shutdown``."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], None]) -> None:
        super().__init__(config)
        self._drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._drain()
        await super().shutdown(sockets)


def serve(config: uvicorn.Config, drain: Callable[[], None], sockets: list[socket.socket] | None = None) -> None:
    """``uvicorn.run`` for one process: exit code 3 when the app did not start, as uvicorn's own.
    With ``sockets``, it accepts on those (``elicitd serve --workers``) instead of binding its own."""
    server = DrainingServer(config, drain)
    server.run(sockets=sockets)
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, after it logged why


def freeze_startup_heap() -> None:
    """Put what startup built out of the cyclic garbage collector's reach, once per process.

    A full collection walks every tracked object, and the event loop — with every parked
    long-poll — waits until it is done. After imports and ``create_app`` a process holds about
    157,000 of them (modules, classes, routes, services) that live as long as it does: walking
    them costs ~60 ms of CPU on the 2-core test machine and can never free one. ``gc.freeze``
    moves them to the permanent generation, so a full collection walks only what requests made
    since. Garbage is collected first, so none of it is kept forever.
    """
    global _heap_frozen  # noqa: PLW0603 - a process-wide fact, like the collector itself
    if _heap_frozen:
        return
    _heap_frozen = True
    gc.collect()
    gc.freeze()
