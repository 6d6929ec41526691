"""Every call to an OAuth provider that fails — refused, hanging, reset, failing TLS, or answering
garbage — ends in a code the caller can act on (``ProviderError``, ``DiscoveryFailed``), never in
another exception (which would be a 500). Discovered endpoints keep the one URL rule: a provider
whose metadata points at plain http elsewhere is not called at all."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from service.connections import oauth
from service.connections.discovery import DiscoveryFailed, MetadataCache
from service.connections.models import Provider
from service.connections.providers import ProviderSpec, ResolvedProvider, resolve
from service.crypto.vault import Vault
from service.http import make_http_client
from service.identity import sessions as store
from service.identity.issuers import IssuerConfig
from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp, new_server_client, running_app
from tests.support.hostile import FAILURES, Answer, Behavior, HostileServer, closed_port, hostile
from tests.support.providers import signed_in_for

TIMEOUT = 1.0
ROUTES: dict[str, Behavior] = {
    **FAILURES,
    "/array": Answer.json(["not", "an", "object"]),
    "/no-token": Answer.json({"token_type": "Bearer"}),
}
VAULT = Vault(KeyRing.parse(KeyRing.generate_entry("k1"), name="k"))


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile(ROUTES) as found:
        yield found


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with make_http_client(TIMEOUT) as client:
        yield client


def endpoints(server: HostileServer) -> list[str]:
    return [
        f"http://127.0.0.1:{closed_port()}/x",
        server.tls_url + "/garbage",
        *(server.url + path for path in ROUTES),
    ]


def provider_at(token_endpoint: str, account_endpoint: str | None = None) -> ResolvedProvider:
    return ResolvedProvider(
        name="acme",
        display_name="Acme",
        issuer=None,
        authorization_endpoint="https://acme.example/authorize",
        token_endpoint=token_endpoint,
        revocation_endpoint=token_endpoint,
        account_endpoint=account_endpoint,
        account_id_field="id",
        account_login_field="login",
        client_id="c",
        client_secret="s",
        token_auth_method="client_secret_basic",
        default_scopes=(),
        scope_separator=" ",
        scope_descriptions={},
        authorize_params={},
        iss_parameter_supported=False,
    )


async def test_a_failing_token_endpoint_is_a_provider_error(http: httpx.AsyncClient, server: HostileServer) -> None:
    for url in endpoints(server):
        provider = provider_at(url)
        with pytest.raises(oauth.ProviderError):
            await oauth.exchange_code(http, provider, redirect_uri="https://e.example/cb", code="c", verifier="v" * 43)
        with pytest.raises(oauth.ProviderError):
            await oauth.refresh(http, provider, "refresh")
        # RFC 7009: only a 200 says "revoked"; whatever else happens, revocation answers, never raises.
        assert isinstance(await oauth.revoke(http, provider, "token", "access_token"), bool)


async def test_a_failing_account_endpoint_is_account_lookup_failed(
    http: httpx.AsyncClient, server: HostileServer
) -> None:
    tokens = oauth.TokenSet(
        access_token="a", refresh_token=None, token_type="Bearer", expires_in=60, scope=None, raw={}
    )
    for url in endpoints(server):
        with pytest.raises(oauth.ProviderError) as failed:
            await oauth.fetch_account(http, provider_at("https://acme.example/token", account_endpoint=url), tokens)
        assert failed.value.error == "account_lookup_failed"


@pytest.mark.parametrize("behavior", FAILURES.values())
async def test_failing_discovery_is_discovery_failed(http: httpx.AsyncClient, behavior: Behavior) -> None:
    with hostile(default=behavior) as idp:
        cache = MetadataCache(http=http, timeout=TIMEOUT)
        with pytest.raises(DiscoveryFailed):
            await cache.get(idp.url + "/tenant")
    with pytest.raises(DiscoveryFailed):
        await MetadataCache(http=http, timeout=TIMEOUT).get(f"http://127.0.0.1:{closed_port()}")


def row_for(issuer: str) -> Provider:
    return Provider(
        name=f"p{uuid.uuid4().hex[:6]}",
        display_name="Acme",
        catalog="oidc",
        issuer=issuer,
        client_id="c",
        token_auth_method="none",
        account_id_field="sub",
        scope_separator=" ",
        enabled=True,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("token_endpoint", "http://attacker.example/token"),  # plain http, off loopback
        ("authorization_endpoint", "http://attacker.example/authorize"),
        ("token_endpoint", "https://exa mple.com/token"),
        ("token_endpoint", "https://[::1/token"),
        ("token_endpoint", "https://user:pw@acme.example/token"),
        ("revocation_endpoint", "http://attacker.example/revoke"),
        ("userinfo_endpoint", "http://attacker.example/me"),
        ("token_endpoint", 42),
    ],
)
async def test_discovered_endpoints_keep_the_url_rule(http: httpx.AsyncClient, field: str, value: object) -> None:
    """The secret, the code and the verifier go to the discovered token endpoint: one named over
    plain http (or malformed) stops the connect before anything is sent."""
    with hostile() as idp:
        issuer = idp.url + "/tenant"
        document = {
            "issuer": issuer,
            "authorization_endpoint": "https://acme.example/authorize",
            "token_endpoint": "https://acme.example/token",
            field: value,
        }
        idp.routes = {"/tenant/.well-known/openid-configuration": Answer.json(document)}
        cache = MetadataCache(http=http, timeout=TIMEOUT)
        with pytest.raises(DiscoveryFailed):
            await resolve(row_for(issuer), VAULT, cache)


async def test_well_formed_discovered_endpoints_are_used(http: httpx.AsyncClient) -> None:
    with hostile() as idp:
        issuer = idp.url + "/tenant"
        document = {
            "issuer": issuer,
            "authorization_endpoint": "https://acme.example/authorize",
            "token_endpoint": idp.url + "/token",  # http is fine on loopback
            "userinfo_endpoint": "https://acme.example/me",
        }
        idp.routes = {"/tenant/.well-known/openid-configuration": Answer.json(document)}
        resolved = await resolve(row_for(issuer), VAULT, MetadataCache(http=http, timeout=TIMEOUT))
    assert resolved.token_endpoint == idp.url + "/token"
    assert resolved.account_endpoint == "https://acme.example/me"


# ---- the connect callback, end to end over HTTP ------------------------------------------------------
@pytest.fixture(scope="module")
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings(outbound_timeout_seconds=TIMEOUT)) as found:
        yield found


async def connect_until_callback(app: RunningApp, server: HostileServer, token_endpoint: str) -> httpx.Response:
    """A signed-in subject continues to the provider and comes back with a code; the callback then
    calls ``token_endpoint``. The issuer is never called (the session is made directly)."""
    iss, sub = f"{server.url}/id-{uuid.uuid4().hex[:6]}", f"u-{uuid.uuid4().hex[:8]}"
    name = f"acme-{uuid.uuid4().hex[:6]}"
    cookie = await signed_in_for(
        app,
        IssuerConfig(
            issuer=iss,
            client_id="elicitd",
            authorization_endpoint=server.url + "/authorize",
            token_endpoint=server.url + "/token",
            jwks_uri=server.url + "/jwks",
        ),
        ProviderSpec(
            name=name,
            client_id="c",
            client_secret="s",
            authorization_endpoint=server.url + "/authorize",
            token_endpoint=token_endpoint,
        ),
        sub,
    )
    client = await new_server_client(app)
    async with app.http(client.api_key) as api:
        created = await api.post(
            "/v1/flows", json={"subject": {"iss": iss, "sub": sub}, "kind": "oauth_connect", "provider": name}
        )
    assert created.status_code == 201, created.text
    flow_id = created.json()["flow"]["id"]
    async with app.http(cookies={store.SESSION_COOKIE: cookie}) as browser:
        page = await browser.get(f"/f/{flow_id}")
        assert page.status_code == 200, page.text[:300]
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf is not None
        onward = await browser.post(f"/connect/{flow_id}/continue", data={"csrf_token": csrf.group(1)})
        assert onward.status_code == 303
        state = httpx.URL(onward.headers["location"]).params["state"]
        return await browser.get("/connect/callback", params={"code": "c0de", "state": state})


@pytest.mark.parametrize("path", ["/hang", "/reset", "/garbage", "/deep", "/down", "/no-token", "closed", "tls"])
async def test_the_connect_callback_shows_a_page_when_the_provider_fails(
    app: RunningApp, server: HostileServer, path: str
) -> None:
    endpoint = {"closed": f"http://127.0.0.1:{closed_port()}/token", "tls": server.tls_url + "/token"}.get(
        path, server.url + path
    )
    response = await connect_until_callback(app, server, endpoint)
    assert response.status_code == 200, response.text[:300]
    assert "text/html" in response.headers["content-type"]
    assert "The connection failed" in response.text
