"""elicitd.

Two things happen on import, before any module of the package can import httpx or redis:

* httpx's command line (``httpx._main``) is loaded on first call rather than with the package.
  httpx imports it whenever ``rich``, ``pygments`` and ``click`` are installed — and Litestar
  installs them — which put ~3.2 MB of modules into every server process for a command elicitd
  never runs. ``httpx.main`` still works: it loads the real module when called.
* redis-py's ``redis.observability.providers`` is executed without OpenTelemetry's metrics SDK.
  redis-py 8 imports ``opentelemetry.sdk.metrics`` there whenever it is installed (elicitd's
  tracing depends on the SDK), only to name a type in annotations and set a flag nothing reads;
  its metrics, when an application turns them on, import the SDK themselves. The module thus
  finds the SDK missing — for that one import only — which keeps ~2.8 MB (the metrics SDK, its
  resource detection and psutil) and ~90 ms of imports out of every process.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
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

_METER_SDK = "opentelemetry.sdk.metrics"


class _WithoutMeterSdk(importlib.machinery.SourceFileLoader):
    """Executes the module with ``import opentelemetry.sdk.metrics`` raising ``ImportError``.

    ``None`` in ``sys.modules`` is Python's own way to make an import fail; it is there only while
    this module runs (at start, while the process imports its modules), and only if the SDK was
    not loaded already — then there is nothing to save and nothing is hidden."""

    def exec_module(self, module: types.ModuleType) -> None:
        hidden = _METER_SDK not in sys.modules
        if hidden:
            sys.modules[_METER_SDK] = None  # type: ignore[assignment]  # the import system's "not importable"
        try:
            super().exec_module(module)
        finally:
            if hidden and sys.modules.get(_METER_SDK, False) is None:
                del sys.modules[_METER_SDK]


class _RedisProviders(importlib.abc.MetaPathFinder):
    """Finds ``redis.observability.providers`` as the path finder would, to load it with
    ``_WithoutMeterSdk``; removes itself once it has."""

    name = "redis.observability.providers"

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader or spec.origin is None:
            return spec  # not a plain source file (a zip, a frozen build): loaded as it comes
        spec.loader = _WithoutMeterSdk(fullname, spec.origin)
        return spec


def _redis_without_meter_sdk() -> None:
    if "redis" in sys.modules or _METER_SDK in sys.modules:
        return  # imported already: nothing left to save
    sys.meta_path.insert(0, _RedisProviders())


_redis_without_meter_sdk()
