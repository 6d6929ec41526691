from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from service.devtools.mount import DevTools
from tests.support.dev_tools import serving_dev_tools


@pytest.fixture(scope="module")
async def dev_tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevTools]:
    async with serving_dev_tools(tmp_path_factory.mktemp("devtools")) as tools:
        yield tools


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10, follow_redirects=False) as client:
        yield client
