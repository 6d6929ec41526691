"""Creating ``api_key`` flows and defining API-key providers."""

from __future__ import annotations

from typing import Any

import pytest

from service.apikeys.providers import parse_config, upsert_api_key_provider
from service.errors import ConfigurationError
from tests.consent.helpers import new_sub
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer


async def post(app: RunningApp, client: ServerClientHandle, body: dict[str, Any]) -> Any:
    async with app.http(client.api_key) as http:
        return await http.post("/v1/flows", json=body)


async def test_unknown_or_oauth_providers_are_refused(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str
) -> None:
    subject = {"iss": issuer.issuer, "sub": new_sub("x")}
    unknown = await post(app, client, {"subject": subject, "kind": "api_key", "provider": "nope"})
    assert unknown.status_code == 400
    assert unknown.json()["code"] == "unknown_provider"
    missing = await post(app, client, {"subject": subject, "kind": "api_key"})
    assert missing.status_code == 400
    with_params = await post(
        app, client, {"subject": subject, "kind": "api_key", "provider": provider, "params": {"secret": "never here"}}
    )
    assert with_params.status_code == 400
    assert with_params.json()["code"] == "invalid_params"


async def test_a_client_limited_to_other_providers_is_refused(
    app: RunningApp, issuer: OAuthServer, provider: str
) -> None:
    from tests.support.apps import new_server_client

    limited = await new_server_client(app, allowed_providers=["github"])
    response = await post(
        app, limited, {"subject": {"iss": issuer.issuer, "sub": "u"}, "kind": "api_key", "provider": provider}
    )
    assert response.status_code == 403
    assert response.json()["code"] == "provider_not_allowed"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"pattern": "("}, "does not compile"),
        ({"min_length": 50, "max_length": 10}, "min_length"),
        ({"check": {"url": "http://api.example.com/me"}}, "https"),
        ({"fields": [{"name": "a", "label": "A"}, {"name": "a", "label": "B"}]}, "unique"),
        ({"account_field": "zzz"}, "account_field"),
        ({"check": {"url": "https://api.example.com/me", "auth": "header"}}, "header"),
        ({"unknown": True}, "unknown"),
    ],
)
def test_provider_definitions_are_validated(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_config(config, name="p")


async def test_an_oauth_provider_cannot_be_turned_into_an_api_key_provider(app: RunningApp) -> None:
    from sqlalchemy import text

    async with app.state.sessions() as session:
        await session.execute(
            text(
                "INSERT INTO providers (name, display_name, client_id, token_endpoint, "
                "authorization_endpoint) VALUES ('oauthy', 'O', 'cid', 'https://o/t', 'https://o/a') "
                "ON CONFLICT DO NOTHING"
            )
        )
        with pytest.raises(ConfigurationError, match="OAuth"):
            await upsert_api_key_provider(session, "oauthy", "O", {})
        await session.rollback()


async def test_an_api_key_provider_refuses_oauth_connect_flows(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str
) -> None:
    response = await post(
        app,
        client,
        {"subject": {"iss": issuer.issuer, "sub": new_sub("w")}, "kind": "oauth_connect", "provider": provider},
    )
    assert response.status_code == 400
    assert response.json()["code"] == "wrong_flow_kind"
