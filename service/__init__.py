"""elicitd.

One thing happens on import, before any module of the package can import httpx: httpx's command
line (``httpx._main``) is loaded on first call rather than with the package. httpx imports it
whenever ``rich``, ``pygments`` and ``click`` are installed — and Litestar installs them — which
put ~3.2 MB of modules into every server process for a command elicitd never runs.
``httpx.main`` still works: it loads the real module when called.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


def _defer_httpx_cli() -> None:
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return  # imported already, by whoever imported httpx first: nothing left to save

    stand_in = types.ModuleType("httpx._main", "httpx's command line, loaded on first call (see service/__init__.py)")

    def main(*args: Any, **kwargs: Any) -> Any:
        if sys.modules.get("httpx._main") is stand_in:
            del sys.modules["httpx._main"]
        return importlib.import_module("httpx._main").main(*args, **kwargs)

    stand_in.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stand_in


_defer_httpx_cli()
