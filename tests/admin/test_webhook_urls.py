"""The admin API keeps the URL rule for webhooks and the JSON rules for its bodies: a malformed URL
is a 400 (never a 500, never stored), a body that is not JSON a 415, a deep one a 400."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Token, admin_http
from tests.support.apps import RunningApp, new_server_client


@pytest.mark.parametrize(
    "url",
    [
        "https://[::1/x",  # was a 500
        "https://exa mple.com/x",  # were accepted
        "https://example.com:99999/x",
        "https://%zz.example/x",
        "https://hooks.example.com/x\r\nX-Injected: 1",
        "https://user:pw@hooks.example.com/x",
        "http://hooks.example.com/x",
        "http://127.0.0.1.evil.example/x",
    ],
)
async def test_a_malformed_webhook_url_is_400_and_not_stored(
    elicitd: RunningApp, tokens: dict[str, Token], url: str
) -> None:
    client = await new_server_client(elicitd)
    async with admin_http(elicitd, tokens["admin"]) as http:
        response = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": url})
        shown = await http.get(f"/admin/v1/server-clients/{client.public_id}")
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_webhook_url"
    assert shown.json()["webhook_url"] is None


async def test_admin_bodies_keep_the_json_rules(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    async with admin_http(elicitd, tokens["admin"]) as http:
        plain = await http.post(
            "/admin/v1/server-clients", content=b'{"name": "plain"}', headers={"Content-Type": "text/plain"}
        )
        deep = await http.post(
            "/admin/v1/server-clients",
            content=b'{"name": "deep", "display_name": ' + b"[" * 500 + b"]" * 500 + b"}",
            headers={"Content-Type": "application/json"},
        )
    assert (plain.status_code, plain.json()["code"]) == (415, "unsupported_media_type")
    assert (deep.status_code, deep.json()["code"]) == (400, "json_too_deep")
