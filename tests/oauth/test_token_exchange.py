"""RFC 8693 token exchange at ``POST /oauth/token``, performed by a stock OAuth client (Authlib's
``AsyncOAuth2Client``), and every refusal in RFC 6749 §5.2 / RFC 8693 §2.2.2 form.

Alice connected the provider through server client A (in Chromium, so A holds a grant). A presents
Alice's MCP access token and gets exactly the provider token the ``/v1`` token endpoint gives; any
request that cannot be honoured gets the registered error code, ``Cache-Control: no-store`` and no
token.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from playwright.async_api import Browser
from sqlalchemy import text

from service.connections.providers import set_enabled as set_provider_enabled
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.settings import Settings
from tests.connections.conftest import accepted_by_provider
from tests.support.apps import ServerClientHandle, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.subjects import OTHER_RESOURCE, RESOURCE, World, build_world, connect

pytestmark = pytest.mark.browser

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture(scope="module")
def idp() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@dataclass
class Scene:
    world: World
    alice: str
    carol: str  # connected, then the provider stops accepting her connection


@pytest.fixture(scope="module")
async def scene(
    make_settings: Callable[..., Settings], idp: OAuthServer, chromium_browser: Browser
) -> AsyncIterator[Scene]:
    async with running_app(make_settings()) as app:
        world = await build_world(app, idp)
        alice, carol = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "carol"))
        await connect(world, chromium_browser, alice)
        await connect(world, chromium_browser, carol)
        async with app.state.sessions() as session:
            await session.execute(
                text(
                    "UPDATE authorizations SET status = 'reauthorization_required', "
                    "health = 'needs_reauthorization' WHERE subject_sub = :s"
                ),
                {"s": carol},
            )
            await session.commit()
        yield Scene(world=world, alice=alice, carol=carol)


def oauth_client(world: World, client: ServerClientHandle | None = None) -> AsyncOAuth2Client:
    """An OAuth client as any MCP server would configure one: client id and secret, Basic auth."""
    chosen = client or world.client
    return AsyncOAuth2Client(client_id=chosen.name, client_secret=chosen.api_key, timeout=30)


async def metadata(world: World) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=world.app.url) as http:
        answer = await http.get("/.well-known/oauth-authorization-server")
    assert answer.status_code == 200
    result: dict[str, Any] = answer.json()
    return result


async def test_the_metadata_advertises_the_exchange(scene: Scene) -> None:
    world = scene.world
    assert await metadata(world) == {
        "issuer": world.app.url,
        "token_endpoint": world.app.url + "/oauth/token",
        "grant_types_supported": [TOKEN_EXCHANGE],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        "response_types_supported": [],
    }


async def test_an_oauth_library_exchanges_the_users_token_for_the_providers(scene: Scene) -> None:
    world = scene.world
    endpoint = (await metadata(world))["token_endpoint"]
    async with oauth_client(world) as client:
        token = await client.fetch_token(
            endpoint,
            grant_type=TOKEN_EXCHANGE,
            subject_token=world.user_token(scene.alice),
            subject_token_type=ACCESS_TOKEN,
            audience=world.provider,
        )
    assert token["access_token"] == world.provider_tokens[scene.alice]
    assert (token["issued_token_type"], token["token_type"], token["scope"]) == (ACCESS_TOKEN, "Bearer", "files:read")
    assert 0 < token["expires_in"] <= 3600
    assert "refresh_token" not in token
    assert accepted_by_provider(world.env, token["access_token"])


async def test_an_opaque_subject_token_a_resource_uri_and_bearer_authentication_work_too(scene: Scene) -> None:
    world = scene.world
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": world.user_token(scene.alice, format="opaque"),
        "subject_token_type": ACCESS_TOKEN,
        "resource": f"{world.app.url}/providers/{world.provider}",
        "scope": "files:read",
    }
    async with world.app.http(world.client.api_key) as http:
        answer = await http.post("/oauth/token", data=form)
    assert answer.status_code == 200, answer.text
    assert answer.json()["access_token"] == world.provider_tokens[scene.alice]
    assert (answer.headers["cache-control"], answer.headers["pragma"]) == ("no-store", "no-cache")


async def exchange(
    world: World, form: dict[str, Any], *, auth: tuple[str, str] | None = None, bearer: str | None = None, **kw: Any
) -> httpx.Response:
    headers: dict[str, str] = {}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    async with httpx.AsyncClient(base_url=world.app.url, auth=auth, timeout=30) as http:
        return await http.post("/oauth/token", data=form, headers=headers, **kw)


def valid_form(scene: Scene, **changes: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": scene.world.user_token(scene.alice),
        "subject_token_type": ACCESS_TOKEN,
        "audience": scene.world.provider,
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value is not None}


# (case, how the form changes, expected error)
REQUEST_ERRORS: list[tuple[str, Callable[[Scene], dict[str, Any]], str]] = [
    ("another grant type", lambda s: valid_form(s, grant_type="client_credentials"), "unsupported_grant_type"),
    ("no grant type", lambda s: valid_form(s, grant_type=None), "invalid_request"),
    ("no subject token", lambda s: valid_form(s, subject_token=None), "invalid_request"),
    (
        "an ID token type",
        lambda s: valid_form(s, subject_token_type="urn:ietf:params:oauth:token-type:id_token"),
        "invalid_request",
    ),
    ("delegation", lambda s: valid_form(s, actor_token="x", actor_token_type=ACCESS_TOKEN), "invalid_request"),
    (
        "a refresh token requested",
        lambda s: valid_form(s, requested_token_type="urn:ietf:params:oauth:token-type:refresh_token"),
        "invalid_request",
    ),
    (
        "an expired subject token",
        lambda s: valid_form(s, subject_token=s.world.user_token(s.alice, ttl=-120)),
        "invalid_request",
    ),
    (
        "a subject token for another resource",
        lambda s: valid_form(s, subject_token=s.world.user_token(s.alice, audience=OTHER_RESOURCE)),
        "invalid_request",
    ),
    ("a revoked opaque subject token", lambda s: valid_form(s, subject_token=revoked(s)), "invalid_request"),
    ("a made-up subject token", lambda s: valid_form(s, subject_token="not-a-token"), "invalid_request"),
    ("no target", lambda s: valid_form(s, audience=None), "invalid_request"),
    ("an unknown provider", lambda s: valid_form(s, audience="nope"), "invalid_target"),
    (
        "a resource that is not elicitd's",
        lambda s: valid_form(s, audience=None, resource="https://api.example.com/"),
        "invalid_target",
    ),
    ("two providers", lambda s: valid_form(s, audience=[s.world.provider, "other"]), "invalid_target"),
    ("a scope the user did not grant", lambda s: valid_form(s, scope="files:read files:write"), "invalid_scope"),
    (
        "a user who never connected",
        lambda s: valid_form(s, subject_token=s.world.user_token(f"dave-{uuid.uuid4().hex[:6]}")),
        "invalid_grant",
    ),
    (
        "a connection the provider revoked",
        lambda s: valid_form(s, subject_token=s.world.user_token(s.carol)),
        "invalid_grant",
    ),
    ("a parameter twice", lambda s: {**valid_form(s), "scope": ["files:read", "files:read"]}, "invalid_request"),
]


def revoked(scene: Scene) -> str:
    token = scene.world.user_token(scene.alice, format="opaque")
    scene.world.idp.revoke_grant(token)
    return token


@pytest.mark.parametrize(("case", "make", "error"), REQUEST_ERRORS, ids=[e[0] for e in REQUEST_ERRORS])
async def test_refusals_follow_rfc_6749_and_8693(
    scene: Scene, case: str, make: Callable[[Scene], dict[str, Any]], error: str
) -> None:
    world = scene.world
    form = make(scene)
    answer = await exchange(world, form, auth=(world.client.name, world.client.api_key))
    assert (answer.status_code, answer.json()["error"]) == (400, error), answer.text
    assert answer.headers["content-type"].startswith("application/json")
    assert (answer.headers["cache-control"], answer.headers["pragma"]) == ("no-store", "no-cache")
    assert isinstance(answer.json()["error_description"], str)
    for provider_token in world.provider_tokens.values():
        assert provider_token not in answer.text
    if isinstance(form.get("subject_token"), str):
        assert form["subject_token"] not in answer.text


async def test_no_connection_says_how_to_start_the_flow_and_the_library_raises_it(scene: Scene) -> None:
    world = scene.world
    async with oauth_client(world) as client:
        with pytest.raises(OAuthError) as refused:
            await client.fetch_token(
                world.app.url + "/oauth/token",
                grant_type=TOKEN_EXCHANGE,
                subject_token=world.user_token(f"erin-{uuid.uuid4().hex[:6]}"),
                subject_token_type=ACCESS_TOKEN,
                audience=world.provider,
            )
    assert refused.value.error == "invalid_grant"
    assert "POST /v1/flows" in str(refused.value.description)
    assert '"kind": "oauth_connect"' in str(refused.value.description)
    answer = await exchange(
        world, valid_form(scene, subject_token=world.user_token(scene.carol)), bearer=world.client.api_key
    )
    assert answer.json()["elicitd_code"] == "reauthorization_required"


async def test_a_client_without_a_grant_gets_invalid_grant_not_the_token(scene: Scene) -> None:
    """Server client B has the same resource URI and a valid token of Alice's, but Alice never
    granted B her connection: the exchange answers as if there were none."""
    world = scene.world
    other = await new_server_client(world.app, subject_proof="required", resource_uris=[RESOURCE])
    answer = await exchange(world, valid_form(scene), auth=(other.name, other.api_key))
    assert (answer.status_code, answer.json()["error"], answer.json()["elicitd_code"]) == (
        400,
        "invalid_grant",
        "not_connected",
    )
    assert world.provider_tokens[scene.alice] not in answer.text
    # Byte for byte what the granted client hears for a user who never connected (docs/security.md).
    nobody = valid_form(scene, subject_token=world.user_token(f"dave-{uuid.uuid4().hex[:8]}"))
    never = await exchange(world, nobody, auth=(world.client.name, world.client.api_key))
    assert (never.status_code, never.content) == (answer.status_code, answer.content)


async def test_a_provider_the_client_may_not_use_is_an_invalid_target(scene: Scene) -> None:
    world = scene.world
    limited = await new_server_client(
        world.app, subject_proof="required", resource_uris=[RESOURCE], allowed_providers=["something-else"]
    )
    answer = await exchange(world, valid_form(scene), auth=(limited.name, limited.api_key))
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_target")


async def test_a_disabled_provider_is_an_invalid_target_though_the_connection_lives(scene: Scene) -> None:
    """The /v1 token read does not look at the provider's switch; the exchange does, and names
    a provider an operator turned off as no provider at all."""
    world = scene.world
    async with world.app.state.sessions() as session:
        assert await set_provider_enabled(session, world.provider, False)
        await session.commit()
    try:
        answer = await exchange(world, valid_form(scene), bearer=world.client.api_key)
    finally:
        async with world.app.state.sessions() as session:
            assert await set_provider_enabled(session, world.provider, True)
            await session.commit()
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_target")
    assert answer.json()["error_description"] == "No such provider is configured."
    assert world.provider_tokens[scene.alice] not in answer.text
    assert (await exchange(world, valid_form(scene), bearer=world.client.api_key)).status_code == 200


async def test_an_opaque_token_is_shown_to_no_issuer_when_two_could_have_made_it(scene: Scene) -> None:
    """A client trusting two issuers that both introspect: elicitd cannot tell which one issued an
    opaque token, and asks neither (a user's token never goes to an issuer that did not make it)."""
    world = scene.world
    second = f"https://second-{uuid.uuid4().hex[:8]}.example.com"
    async with world.app.state.sessions() as session:
        await upsert_issuer(
            session,
            world.app.state.vault,
            IssuerConfig(issuer=second, client_id="elicitd", introspection_client_id="elicitd-introspection"),
        )
        await session.commit()
    both = await new_server_client(
        world.app, subject_proof="required", resource_uris=[RESOURCE], trusted_issuers=[world.iss, second]
    )
    before = world.idp.stats().introspection_calls
    answer = await exchange(
        world,
        valid_form(scene, subject_token=world.user_token(scene.alice, format="opaque")),
        auth=(both.name, both.api_key),
    )
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")
    assert "cannot tell which issuer" in answer.json()["error_description"]
    assert world.idp.stats().introspection_calls == before
    # A JWT says where it comes from: the same client gets past the subject check (to "no grant").
    proven = await exchange(world, valid_form(scene), auth=(both.name, both.api_key))
    assert (proven.status_code, proven.json()["error"]) == (400, "invalid_grant")


async def test_client_authentication_failures_are_invalid_client(scene: Scene) -> None:
    world = scene.world
    form = valid_form(scene)
    wrong_key = "elk_00000000_" + "x" * 43
    attempts = {
        "none": await exchange(world, form),
        "wrong key": await exchange(world, form, auth=(world.client.name, wrong_key)),
        "another client's name": await exchange(world, form, auth=("someone-else", world.client.api_key)),
        "wrong bearer": await exchange(world, form, bearer=wrong_key),
        "secret in the body": await exchange(
            world, {**form, "client_id": world.client.name, "client_secret": world.client.api_key}
        ),
    }
    async with httpx.AsyncClient(base_url=world.app.url) as http:
        attempts["malformed basic"] = await http.post("/oauth/token", data=form, headers={"Authorization": "Basic !!!"})
    for case, answer in attempts.items():
        assert (answer.status_code, answer.json()["error"]) == (401, "invalid_client"), case
        assert answer.headers["www-authenticate"] == 'Basic realm="elicitd"', case
        assert answer.headers["cache-control"] == "no-store", case
        assert world.provider_tokens[scene.alice] not in answer.text, case


async def test_a_body_that_is_not_a_form_is_refused(scene: Scene) -> None:
    world = scene.world
    async with world.app.http(world.client.api_key) as http:
        answer = await http.post("/oauth/token", json=valid_form(scene))
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")


async def test_the_public_client_id_works_as_well_as_the_name(scene: Scene) -> None:
    world = scene.world
    answer = await exchange(world, valid_form(scene), auth=(world.client.public_id, world.client.api_key))
    assert answer.status_code == 200, answer.text
