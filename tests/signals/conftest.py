"""Webhook tests get a database of their own: every running app's webhook worker claims any due
event in its database, so another test's instance (with other retry timings) must not see these."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from service.settings import Settings, normalize_database_url
from tests.support import backends


@pytest.fixture(scope="module")
async def signals_database(backend: backends.Backends) -> AsyncIterator[str]:
    async with backends.migrated_database(backend.server_url) as url:
        yield url


@pytest.fixture(scope="module")
def make_settings(make_settings: Callable[..., Settings], signals_database: str) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return make_settings(**{"database_url": normalize_database_url(signals_database), **overrides})

    return make
