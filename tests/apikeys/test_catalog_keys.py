"""API-key services from the catalog: each ``api_key`` entry becomes a definition the form and the
live check read, and a real entry (Twilio's, unchanged but for its host, pointed at a stand-in)
renders its form from the entry's fields in Chromium, a key the stand-in accepts is stored, one it
refuses is not, and the key reaches no page, answer, event or log line."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from playwright.async_api import Page

from service.apikeys.catalog import definition_from_entry
from service.apikeys.providers import parse_config, upsert_api_key_provider
from service.apikeys.service import _check_request
from service.connections.catalog import BUILT_IN_DIR, CATALOG, entry_from_document, read_document
from service.errors import ConfigurationError
from tests.apikeys.test_api_key_browser import all_text
from tests.consent.helpers import create_flow, new_sub, open_as
from tests.support.apps import LogCapture, RunningApp, ServerClientHandle
from tests.support.browser import save_screenshot
from tests.support.oauth_server import OAuthServer

API_KEY_ENTRIES = sorted(k for k, e in CATALOG.items() if e.auth_mode == "api_key")


@pytest.mark.parametrize("key", API_KEY_ENTRIES)
def test_every_api_key_entry_becomes_a_definition(key: str) -> None:
    entry = CATALOG[key]
    assert entry.api_key is not None
    config = parse_config(definition_from_entry(entry), name=key)
    assert config.check is not None
    (secret,) = [f for f in entry.api_key.fields.values() if f.secret]
    assert config.key_label == secret.title
    assert config.pattern == secret.pattern
    assert [f.name for f in config.fields] == [n for n, f in entry.api_key.fields.items() if not f.secret]


def _headers(key: str, secret: str, fields: dict[str, str]) -> tuple[str, dict[str, str]]:
    config = parse_config(definition_from_entry(CATALOG[key]), name=key)
    assert config.check is not None
    return _check_request(config.check, secret, fields)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_each_entry_sends_the_key_as_its_provider_documents() -> None:
    assert _headers("openai", "sk-abc", {}) == ("https://api.openai.com/v1/models", {"Authorization": "Bearer sk-abc"})
    assert _headers("anthropic", "sk-ant-x", {}) == (
        "https://api.anthropic.com/v1/models",
        {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-x"},
    )
    sid = "AC" + "0" * 32
    assert _headers("twilio", "t0k", {"account_sid": sid}) == (
        f"https://api.twilio.com/2010-04-01/Accounts/{sid}.json",
        {"Authorization": basic(sid, "t0k")},
    )
    assert _headers("freshdesk", "k3y", {"domain": "acme"}) == (
        "https://acme.freshdesk.com/api/v2/agents/me",
        {"Authorization": basic("k3y", "X")},
    )
    assert _headers("pagerduty", "pd", {"region": "api.eu"}) == (
        "https://api.eu.pagerduty.com/abilities",
        {"Accept": "application/vnd.pagerduty+json;version=2", "Authorization": "Token token=pd"},
    )
    assert _headers("datadog", "dd", {"site": "datadoghq.eu"}) == (
        "https://api.datadoghq.eu/api/v1/validate",
        {"DD-API-KEY": "dd"},
    )


def test_an_oauth_entry_is_not_an_api_key_service() -> None:
    with pytest.raises(ConfigurationError, match="'github': is not an API key service"):
        definition_from_entry(CATALOG["github"])


@pytest.fixture
def stand_in(issuer: OAuthServer) -> Iterator[OAuthServer]:
    yield issuer
    issuer.configure(routes=None, key_check=None)


async def test_a_catalog_api_key_form_checks_the_key_at_a_stand_in(
    app: RunningApp, client: ServerClientHandle, stand_in: OAuthServer, browser_page: Page
) -> None:
    document = read_document(BUILT_IN_DIR / "twilio.yaml")
    sid = "AC" + uuid.uuid4().hex
    verification = document["api_key"]["verification"]
    parts = urlsplit(verification["url"])
    origin = urlsplit(stand_in.base_url)
    verification["url"] = urlunsplit((origin.scheme, origin.netloc, parts.path, "", ""))
    good, bad = uuid.uuid4().hex, uuid.uuid4().hex
    stand_in.configure(
        routes={parts.path.replace("{account_sid}", sid): "key_check"},
        key_check={
            "header": "authorization",
            "accepted": ["Basic " + base64.b64encode(f"{sid}:{good}".encode()).decode()],
        },
    )
    name = f"twilio-{uuid.uuid4().hex[:6]}"
    entry = entry_from_document(name, document)
    async with app.state.sessions() as session:
        await upsert_api_key_provider(session, name, entry.display_name, definition_from_entry(entry))
        await session.commit()

    sub = new_sub("tess")
    body = {"subject": {"iss": stand_in.issuer, "sub": sub}, "kind": "api_key", "provider": name}
    created = await create_flow(app, client, body)
    flow_id = created["flow"]["id"]
    capture = LogCapture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        await open_as(browser_page, created["flow"]["url"], sub, stand_in)
        # The form is the entry's: its secret field's title and its plain field with its pattern.
        assert await browser_page.locator("label[for=secret]").inner_text() == "auth token"
        assert await browser_page.locator("#secret").get_attribute("type") == "password"
        assert await browser_page.locator("label[for=field_account_sid]").inner_text() == "Your account SID"
        # The entry's example value is said to be one, isolated left to right, and names the field.
        assert await browser_page.locator("#help_account_sid").inner_text() == (
            "For example: AC0123456789abcdef0123456789abcdef"
        )
        assert await browser_page.locator("#field_account_sid").get_attribute("aria-describedby") == "help_account_sid"
        await save_screenshot(browser_page, "api-key-catalog-page")
        before = stand_in.stats().api_calls.get("key_check", 0)

        await browser_page.fill("#field_account_sid", sid)
        await browser_page.fill("#secret", bad)
        async with browser_page.expect_navigation():
            await browser_page.click("#save")
        assert "did not accept" in await browser_page.locator("#error").inner_text()
        assert await browser_page.locator("#secret").input_value() == ""
        assert stand_in.stats().api_calls.get("key_check", 0) == before + 1

        await browser_page.fill("#field_account_sid", sid)
        await browser_page.fill("#secret", good)
        async with browser_page.expect_navigation():
            await browser_page.click("#save")
        assert await browser_page.locator("#outcome").inner_text() == "Saved"
        assert stand_in.stats().api_calls.get("key_check", 0) == before + 2
    finally:
        root.removeHandler(capture)
        root.setLevel(level)

    async with app.http(client.api_key) as http:
        token = await http.get(f"/v1/connections/{name}/token", params={"iss": stand_in.issuer, "sub": sub})
        flow = await http.get(f"/v1/flows/{flow_id}")
    assert token.status_code == 200, token.text
    assert token.json()["access_token"] == good
    assert flow.json()["result"]["fields"] == {"account_sid": sid}
    for secret in (good, bad):
        assert secret not in flow.text and secret not in json.dumps(created)
        assert secret not in await browser_page.content()
        assert secret not in await all_text(app, flow_id)
        assert not [line for line in capture.lines if secret in line]
