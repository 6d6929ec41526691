"""How uvicorn serves elicitd: uvloop and httptools when they are installed, asyncio and h11 if not.

uvloop's transports and httptools' C parser replace uvicorn's pure-Python connection state
(h11's per-connection state machine, asyncio's selector transport), which is most of what a
parked long-poll costs in memory and a visible share of every request's CPU. Both are pinned
dependencies; the fallback keeps a source checkout without compiled wheels working.
"""

from __future__ import annotations

import gc
import importlib.util
from typing import Any, TypedDict

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
