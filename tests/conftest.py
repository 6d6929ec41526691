"""Shared fixtures: real PostgreSQL and Redis (see ``tests/support/backends.py``), a fresh
database per session migrated by the real Alembic migrations, and real elicitd instances."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from joserfc.jwk import ECKey

from service.db.migrate import upgrade_async
from service.flows.schemas import Subject
from service.settings import KeyRing, Settings
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app

TEST_KEYS = KeyRing.parse("test2:" + "A" * 43 + ",test1:" + "B" * 43, name="test keys")

TEST_SIGNING_KEY = ECKey.generate_key("P-256").as_pem(private=True).decode("ascii")


@pytest.fixture(scope="session")
def backend() -> Iterator[backends.Backends]:
    with backends.discover() as found:
        yield found


@pytest.fixture(scope="session")
async def database_url(backend: backends.Backends) -> AsyncIterator[str]:
    url = await backends.create_database(backend.server_url)
    await upgrade_async(_sa(url))
    yield url
    await backends.drop_database(backend.server_url, url)


def _sa(url: str) -> str:
    from service.settings import normalize_database_url

    return normalize_database_url(url)


@pytest.fixture(scope="session")
def make_settings(database_url: str, backend: backends.Backends) -> Callable[..., Settings]:
    channel = f"elicitd:test:{uuid.uuid4().hex[:8]}"

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": _sa(database_url),
            "redis_url": backend.redis_url,
            "public_url": "http://127.0.0.1:0",
            "keys": TEST_KEYS,
            "redis_channel": channel,
            "poll_interval_seconds": 0.5,
            "sweep_interval_seconds": 0.5,
            "api_key_cache_seconds": 0,
            "log_json": True,
            # Consent receipts are signed; an instance without a key refuses consent flows (503).
            "signing_key": TEST_SIGNING_KEY,
        }
        values.update(overrides)
        # Test receivers (webhooks, example MCP servers) listen on loopback, which webhook
        # deliveries refuse unless allowed; a test that wants it refused sets the variable itself.
        values["extra"] = {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128", **values.get("extra", {})}
        # Proactive refresh passes would refresh other tests' tokens behind their backs; the tests
        # of the refresher run its passes themselves (tests/connections/test_health.py).
        values["extra"].setdefault("REFRESH_PROACTIVE", "false")
        # Likewise health probes (tests/connections/test_probes.py runs its own passes).
        values["extra"].setdefault("PROBE_ENABLED", "false")
        return Settings(**values)

    return make


@pytest.fixture(scope="session")
async def elicitd(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    """One shared instance with default test settings."""
    async with running_app(make_settings()) as app:
        yield app


@pytest.fixture
async def server_client(elicitd: RunningApp) -> ServerClientHandle:
    """A fresh server client per test, so tests never see each other's flows."""
    return await new_server_client(elicitd)


@pytest.fixture
def subject() -> Subject:
    return Subject(iss="https://id.example.com", sub=f"user-{uuid.uuid4().hex[:10]}")


# `make test-backends` runs the suite a second time on the servers ELICITD_TEST_DATABASE_URL and
# ELICITD_TEST_REDIS_URL name (a second PostgreSQL and Redis version). With this variable set it
# keeps only the tests that reach those servers — through the `backend` fixture, or a module that
# reads the variables or `tests.support.backends` itself — and deselects the rest (image and
# compose builds, manifests, catalogues, the client packages, and the Chromium tests), which `make
# test` has just run and which would run the same way again.
BACKENDS_ONLY = "ELICITD_TEST_BACKENDS_ONLY"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import os
    from pathlib import Path

    # Read once, then gone: a pytest the tests start themselves (tests/docs) selects as usual.
    if os.environ.pop(BACKENDS_ONLY, None) != "1":
        return
    reads: dict[Path, bool] = {}

    def reaches_backends(item: pytest.Item) -> bool:
        # Chromium tests drive the pages; the statements behind them are the HTTP tests' own, which
        # run here. On the second servers they would repeat the first pass's browser work only.
        if item.get_closest_marker("browser") is not None:
            return False
        if "backend" in getattr(item, "fixturenames", ()):
            return True
        path = Path(str(item.path))
        if path not in reads:
            text = path.read_text(encoding="utf-8")
            reads[path] = "ELICITD_TEST_" in text or "backends" in text
        return reads[path]

    kept = [item for item in items if reaches_backends(item)]
    dropped = [item for item in items if not reaches_backends(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
