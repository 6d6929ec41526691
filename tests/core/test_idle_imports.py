"""An idle server loads only what serving the API needs: what a sign-in, a provider connection, a
page or a traced request needs is imported by the first of them.

The probe builds the app as ``elicitd serve`` and the benchmark do (settings from ``ELICITD_*``,
``build_services``, ``create_app``), runs its startup (database pool, Redis subscription), then
reports which of these modules are loaded. Most were imported by every process before: together
~26 MB of an idle server's RSS (bench/README.md); the last few never were, and stay that way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

from service.settings import KeyRing, Settings

# Exact module names: a package's top module is loaded whenever any part of it is.
NOT_LOADED_WHEN_IDLE = (
    "pydantic",  # Litestar's pydantic plugins, when a test tool installed pydantic (service/app.py)
    "litestar.plugins.pydantic",
    "attr",  # Litestar's attrs schema plugin, likewise
    "litestar.plugins.attrs",
    "rich",  # httpx's command line (service/__init__.py)
    "pygments",
    "jinja2",  # the pages' template engine, built by the first page (service/templating.py)
    "babel",  # the pages' catalogues and locale data, loaded by the first page (service/i18n.py)
    "authlib",  # OAuth client code: the first sign-in, connection or introspection
    "joserfc",  # JOSE: the first subject token, ID token or (with a signing key) startup
    "PIL",  # Pillow: the first logo upload (service/branding/images.py)
    "opentelemetry.sdk",  # tracing's SDK only with ELICITD_OTEL_ENABLED; redis-py's metrics import (service/__init__.py)
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.metrics",
    "psutil",  # the metrics SDK's resource detection (test extras only)
    "stripe",  # the Stripe provider: built by the payments plugin when Stripe is configured
    "mcp",  # the admin MCP server's SDK
    "playwright",  # screenshots and browser tests
    "jsonschema",  # the catalog lint: an operator's provider files (ELICITD_PROVIDERS_DIR)
)

_PROBE = """
import asyncio, json, sys

from service.app import create_app
from service.logs import configure_logging
from service.services import build_services
from service.settings import Settings


async def main():
    settings = Settings.from_env()
    configure_logging(settings)
    app = create_app(build_services(settings))
    received = asyncio.Queue()
    await received.put({"type": "lifespan.startup"})
    sent = []
    async def send(message):
        sent.append(message)
    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, received.get, send))
    while not sent:
        await asyncio.sleep(0.01)
    loaded = [name for name in sys.argv[1:] if name in sys.modules]
    await received.put({"type": "lifespan.shutdown"})
    await lifespan
    print(json.dumps({"started": sent[0]["type"], "loaded": loaded}), file=sys.stderr)


asyncio.run(main())
"""


def test_idle_server_leaves_heavy_modules_unloaded(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": settings.database_url,
            "ELICITD_REDIS_URL": settings.redis_url or "",
            "ELICITD_REDIS_CHANNEL": settings.redis_channel,
            "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
            "ELICITD_KEYS": KeyRing.generate_entry("i1"),
        }
    )
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *NOT_LOADED_WHEN_IDLE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"started": "lifespan.startup.complete", "loaded": []}


def test_the_metrics_sdk_is_hidden_from_redis_py_alone() -> None:
    """redis-py loads without OpenTelemetry's metrics SDK (service/__init__.py), and the SDK is
    then importable as usual: the hiding lasts for that one module, and its finder is gone."""
    probe = (
        "import sys, service, redis.asyncio\n"
        "print(sorted(n for n in ('opentelemetry.sdk.metrics', 'psutil') if n in sys.modules))\n"
        "import opentelemetry.sdk.metrics\n"
        "print(opentelemetry.sdk.metrics.MeterProvider.__name__)\n"
        "print([type(f).__name__ for f in sys.meta_path if type(f).__module__ == 'service'])\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "MeterProvider", "[]"]
