"""How uvicorn serves elicitd: uvloop and httptools when they are installed, asyncio and h11 if not.

uvloop's transports and httptools' C parser replace uvicorn's pure-Python connection state
(h11's per-connection state machine, asyncio's selector transport), which is most of what a
parked long-poll costs in memory and a visible share of every request's CPU. Both are pinned
dependencies; the fallback keeps a source checkout without compiled wheels working.
"""

from __future__ import annotations

import importlib.util
from typing import TypedDict


class ServerImpl(TypedDict):
    loop: str
    http: str


def uvicorn_options() -> ServerImpl:
    """``loop`` and ``http`` for ``uvicorn.run`` / ``uvicorn.Config`` (and the ``--loop``/``--http`` flags)."""
    fast_loop = importlib.util.find_spec("uvloop") is not None
    fast_http = importlib.util.find_spec("httptools") is not None
    return {"loop": "uvloop" if fast_loop else "asyncio", "http": "httptools" if fast_http else "h11"}
