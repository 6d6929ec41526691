"""An operator gives a scope plain words per language through the admin API; tags and the text
rule are checked as for any other text."""

from __future__ import annotations

import uuid

from service.connections.providers import get_provider
from tests.admin.conftest import PROVIDER_CLIENT, Token, admin_http
from tests.support.apps import RunningApp
from tests.support.oauth_server import OAuthServer


async def test_scope_words_per_language(elicitd: RunningApp, oauth: OAuthServer, tokens: dict[str, Token]) -> None:
    name = f"p-{uuid.uuid4().hex[:10]}"
    words = {"files:read": {"en": "Read your files", "th": "อ่านไฟล์ของคุณ"}, "files:write": "Change your files"}
    body = {
        "name": name,
        "catalog": "oauth2",
        "client_id": PROVIDER_CLIENT,
        "client_secret": "s",
        "issuer": oauth.issuer,
        "scope_descriptions": words,
    }
    async with admin_http(elicitd, tokens["admin"]) as http:
        created = await http.post("/admin/v1/providers", json=body)
        assert created.status_code == 201, created.text
        bad_tag = await http.post(
            "/admin/v1/providers",
            json={**body, "name": name + "t", "scope_descriptions": {"files:read": {"not a tag": "x"}}},
        )
        spoof = await http.post(
            "/admin/v1/providers",
            json={**body, "name": name + "s", "scope_descriptions": {"files:read": {"ar": "اقرأ\u202e"}}},
        )
    assert bad_tag.status_code == 400
    assert (spoof.status_code, spoof.json()["code"]) == (400, "invalid_provider")
    assert "U+202E" in spoof.json()["detail"]
    async with elicitd.state.sessions() as session:
        row = await get_provider(session, name)
        assert row is not None
        assert row.scope_descriptions["files:read"] == {"en": "Read your files", "th": "อ่านไฟล์ของคุณ"}
        assert row.scope_descriptions["files:write"] == "Change your files"
