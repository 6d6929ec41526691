"""The live API-key check against a provider that fails: each failure is a message on the form
(``EntryRejected``, reason ``check_unavailable``), never an exception that would be a 500."""

from __future__ import annotations

import pytest

from service.apikeys.plugin import ApiKeyKindServices
from service.apikeys.providers import ApiKeyProvider, parse_config
from service.apikeys.service import EntryRejected
from tests.support.apps import RunningApp
from tests.support.hostile import DEEP_JSON, GARBAGE, SERVER_ERROR, Answer, Behavior, Hang, Reset, closed_port, hostile


def provider(url: str) -> ApiKeyProvider:
    config = parse_config({"check": {"url": url, "auth": "bearer", "timeout_seconds": 1}}, name="acme")
    return ApiKeyProvider(name="acme", display_name="Acme", enabled=True, config=config)


@pytest.mark.parametrize("behavior", [Hang(), Reset(), SERVER_ERROR, Answer(429, b"slow down", "text/plain")])
async def test_a_failing_check_is_a_form_message(elicitd: RunningApp, behavior: Behavior) -> None:
    with hostile(default=behavior) as server:
        for url in (server.url + "/me", server.tls_url + "/me"):
            with pytest.raises(EntryRejected) as rejected:
                await elicitd.state.kind("api_key", ApiKeyKindServices).apikeys.live_check(
                    provider(url), "sk_live_x", {}
                )
            assert rejected.value.reason == "check_unavailable"


async def test_an_unreachable_check_is_a_form_message(elicitd: RunningApp) -> None:
    with pytest.raises(EntryRejected) as rejected:
        await elicitd.state.kind("api_key", ApiKeyKindServices).apikeys.live_check(
            provider(f"http://127.0.0.1:{closed_port()}/me"), "sk_live_x", {}
        )
    assert rejected.value.reason == "check_unavailable"


@pytest.mark.parametrize("behavior", [GARBAGE, DEEP_JSON])
async def test_any_2xx_body_is_accepted_without_being_parsed(elicitd: RunningApp, behavior: Behavior) -> None:
    """Only the status decides (2xx valid, 401/403 refused): the body is never parsed."""
    with hostile(default=behavior) as server:
        await elicitd.state.kind("api_key", ApiKeyKindServices).apikeys.live_check(
            provider(server.url + "/me"), "sk_live_x", {}
        )
