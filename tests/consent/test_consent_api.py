"""Creating consent flows through the API: validation, reuse, and the signing-key requirement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.consent.plugin import ConsentKindServices
from service.errors import ConfigurationError
from service.services import build_services
from service.settings import Settings
from tests.consent.helpers import create_flow, new_sub
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.oauth_server import OAuthServer


def body(issuer: OAuthServer, sub: str, **params: Any) -> dict[str, Any]:
    return {"subject": {"iss": issuer.issuer, "sub": sub}, "kind": "consent", "params": params}


@pytest.mark.parametrize(
    "params",
    [
        {"description": "no title"},
        {"title": "no description"},
        {"title": "", "description": "empty title"},
        {"title": "bidi \u202e override", "description": "x"},
        {"title": "line\nbreak in title", "description": "x"},
        {"title": "t", "description": "nul \x00 byte"},
        # The review's finds: each went through the old filter.
        {"title": "arabic letter mark \u061c", "description": "x"},
        {"title": "t", "description": "line\u2028separator"},
        {"title": "t", "description": "paragraph\u2029separator"},
        {"title": "t", "description": "C1 \x85 next line"},
        {"title": "t", "description": "C1 \x9b CSI"},
        {"title": "zero\u200bwidth", "description": "x"},
        {"title": "t", "description": "joiner\u200d"},
        {"title": "t", "description": "bom\ufeff"},
        {"title": "t", "description": "tag \U000e0041"},
        {"title": "t", "description": "d", "details": {"Amount": "10\u202e0"}},
        {"title": "t", "description": "d", "details": [{"key": "To\u2066", "value": "x"}]},
        {"title": "t", "description": "d", "unexpected": 1},
        {"title": "t", "description": "d", "details": [{"key": "k"}]},
        {"title": "t", "description": "d", "details": [{"key": "k", "value": "v"}] * 21},
        {"title": "t" * 201, "description": "d"},
        {"title": "t", "description": "d" * 4001},
    ],
)
async def test_invalid_params_are_refused_with_a_stable_code(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, params: dict[str, Any]
) -> None:
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body(issuer, new_sub("v"), **params))
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_params"


async def test_provider_or_scopes_are_refused(app: RunningApp, client: ServerClientHandle, issuer: OAuthServer) -> None:
    request = body(issuer, new_sub("p"), title="t", description="d")
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json={**request, "provider": "github"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_params"


async def test_the_same_request_reuses_the_pending_flow_and_details_may_be_an_object(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer
) -> None:
    sub = new_sub("r")
    as_list = body(
        issuer,
        sub,
        title="Delete repo",
        description="Deletes acme/site.",
        details=[{"key": "Repository", "value": "acme/site"}],
    )
    as_object = body(
        issuer, sub, title="Delete repo", description="Deletes acme/site.", details={"Repository": "acme/site"}
    )
    first = await create_flow(app, client, as_list)
    second = await create_flow(app, client, as_object, expect=200)
    assert first["flow"]["id"] == second["flow"]["id"]
    other = await create_flow(app, client, body(issuer, sub, title="Delete repo", description="Deletes acme/web."))
    assert other["flow"]["id"] != first["flow"]["id"]


async def test_consent_needs_a_signing_key(make_settings: Callable[..., Settings]) -> None:
    """Without ELICITD_SIGNING_KEY consent is refused up front (503), not at approval time."""
    async with running_app(make_settings(signing_key=None)) as bare:
        client = await new_server_client(bare)
        async with bare.http(client.api_key) as http:
            response = await http.post(
                "/v1/flows",
                json={
                    "subject": {"iss": "https://id.example.com", "sub": "u1"},
                    "kind": "consent",
                    "params": {"title": "t", "description": "d"},
                },
            )
            keys = await http.get("/.well-known/jwks.json")
    assert response.status_code == 503
    assert response.json()["code"] == "consent_unavailable"
    assert keys.status_code == 200
    assert keys.json() == {"keys": []}


def test_a_malformed_signing_key_stops_startup(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ConfigurationError, match="ELICITD_SIGNING_KEY"):
        build_services(make_settings(signing_key="-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----"))
    with pytest.raises(ConfigurationError, match="ELICITD_SIGNING_KEY"):
        build_services(make_settings(signing_key="ssh-ed25519 AAAA"))


async def test_jwks_publishes_public_keys_only(app: RunningApp) -> None:
    async with httpx.AsyncClient(base_url=app.url) as http:
        response = await http.get("/.well-known/jwks.json")
    assert response.status_code == 200
    [key] = response.json()["keys"]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["use"] == "sig"
    assert "d" not in key
    signer = app.state.kind("consent", ConsentKindServices).consent.signer
    assert signer is not None
    assert key["kid"] == signer.key_id
