"""Fixtures for the MCP tests: the real OAuth/OIDC server (issuer of the MCP client's tokens and
third-party provider) and headless Chromium."""

from __future__ import annotations

from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    pytest_runtest_makereport,
)
from tests.support.oauth_server import oauth_server  # noqa: F401 (fixture)
