"""The brand page tests run the connect tests' instance: one real OAuth server as issuer and
provider, elicitd with both registered, Chromium."""

from __future__ import annotations

from tests.connections.conftest import env, oauth  # noqa: F401 (fixtures are found by name)
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    chromium_browser,
    pytest_runtest_makereport,
)
