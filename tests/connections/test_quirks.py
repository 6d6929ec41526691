"""Provider quirks, handled by catalog fields: for each quirk family, a real provider's catalog file
— unchanged but for its host, pointed at the test OAuth server started in that family's profile —
goes through a connect over HTTP (the continue page, the provider's login, the callback), then
the token endpoint, a refresh and a revocation."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from sqlalchemy import text

from service.connections.catalog import BUILT_IN_DIR, CATALOG, entry_from_document, read_document
from service.connections.catalog_lint import lint_document
from service.connections.providers import ProviderSpec
from service.db.base import CONNECTION_ID
from service.identity import sessions as store
from service.identity.issuers import IssuerConfig
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import signed_in_for

CLIENT_ID, CLIENT_SECRET = "quirk-client", "quirk-client-secret-value"


@pytest.fixture(scope="module")
def server() -> Iterator[OAuthServer]:
    with OAuthServer() as found:
        yield found


@pytest.fixture(scope="module")
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings()) as found:
        yield found


@pytest.fixture
def fresh(server: OAuthServer) -> Iterator[OAuthServer]:
    server.reset()
    yield server
    server.configure(profile=None, routes=None, account_paths=None)


_ROLES = {"authorization": "authorize", "token": "token", "revocation": "revoke", "refresh": "token"}


def pointed(
    key: str,
    server: OAuthServer,
    monkeypatch: pytest.MonkeyPatch,
    *,
    document: dict[str, Any] | None = None,
    values: dict[str, str] | None = None,
) -> str:
    """The built-in entry ``key`` read from its file (or an operator's ``document``), every URL's
    scheme and host replaced by the test server's (paths and queries kept); the server answers
    those paths as the provider's. A host templated from connection parameters
    (``{subdomain}.zendesk.com``) moves into the path, placeholders kept, and the server answers the
    paths ``values`` fill it to. The entry joins this process's catalog under a key of its own;
    returned is that key."""
    document = document or read_document(BUILT_IN_DIR / f"{key}.yaml")
    origin = urlsplit(server.base_url)
    routes: dict[str, str] = {}
    defaults = {k: p["default"] for k, p in (document.get("parameters") or {}).items() if "default" in p}
    filled = {**defaults, **(values or {})}

    def point(url: str, role: str) -> str:
        parts = urlsplit(url.replace("{", "%7B").replace("}", "%7D"))
        path = parts.path.replace("%7B", "{").replace("%7D", "}")
        host = parts.netloc.replace("%7B", "{").replace("%7D", "}")
        if "{" in host:
            path = f"/{host}{path}"
        routes[re.sub(r"\{(\w+)\}", lambda m: filled.get(m.group(1), m.group(0)), path)] = role
        return urlunsplit((origin.scheme, origin.netloc, path, parts.query, ""))

    if "issuer" in document:
        # Explicit endpoints beside the issuer (Xero's): the issuer is the server's own, whose
        # metadata says it sends iss on the callback.
        assert document.get("endpoints"), "an entry discovered from its issuer cannot be pointed elsewhere"
        document["issuer"] = server.base_url
    document["endpoints"] = {name: point(url, _ROLES[name]) for name, url in document["endpoints"].items()}
    if document["account"].get("endpoint"):
        document["account"]["endpoint"] = point(document["account"]["endpoint"], "account")
    for lookup in document.get("lookups") or ():
        lookup["endpoint"] = point(lookup["endpoint"], "resources")
    pointed_key = f"{key}-at-{origin.port}"
    monkeypatch.setitem(CATALOG, pointed_key, entry_from_document(pointed_key, document))
    paths = {"id": document["account"]["id_field"]}
    if document["account"].get("login_field"):
        paths["login"] = document["account"]["login_field"]
    server.configure(routes=routes, account_paths=paths)
    return pointed_key


@dataclass
class Connected:
    provider: str
    client: ServerClientHandle
    iss: str
    sub: str
    result: dict[str, Any]
    authorize_url: httpx.URL
    callback: httpx.URL

    @property
    def connection_id(self) -> uuid.UUID:
        found = CONNECTION_ID.parse(self.result["connection_id"])
        assert found is not None
        return found


async def signed_in_subject(app: RunningApp, server: OAuthServer, catalog_key: str) -> tuple[str, str, str, str]:
    """A new subject signed in at an issuer on ``server`` and a provider of ``catalog_key`` made
    for it: (iss, sub, the provider's name, the browser's session cookie)."""
    iss, sub = f"{server.base_url}/people-{uuid.uuid4().hex[:6]}", f"u{uuid.uuid4().hex[:8]}"
    name = f"q-{uuid.uuid4().hex[:8]}"
    cookie = await signed_in_for(
        app,
        IssuerConfig(
            issuer=iss,
            client_id="elicitd",
            authorization_endpoint=server.url("/authorize"),
            token_endpoint=server.url("/token"),
            jwks_uri=server.jwks_uri,
        ),
        ProviderSpec(name=name, catalog=catalog_key, client_id=CLIENT_ID, client_secret=CLIENT_SECRET),
        sub,
    )
    return iss, sub, name, cookie


async def connect(
    app: RunningApp,
    server: OAuthServer,
    catalog_key: str,
    *,
    scopes: list[str] | None = None,
    tamper: Callable[[httpx.URL], httpx.URL] | None = None,
    params: dict[str, str] | None = None,
) -> Connected | httpx.Response:
    """A signed-in subject connects ``catalog_key``'s provider: continue, log in at the provider,
    back through the callback; the flow's result is returned. ``tamper`` changes the callback on
    its way back (an attacker's edit); then the callback's answer is returned instead."""
    iss, sub, name, cookie = await signed_in_subject(app, server, catalog_key)
    client = await new_server_client(app)
    body: dict[str, Any] = {"subject": {"iss": iss, "sub": sub}, "kind": "oauth_connect", "provider": name}
    if scopes is not None:
        body["scopes"] = scopes
    if params is not None:
        body["params"] = params
    async with app.http(client.api_key) as api:
        created = await api.post("/v1/flows", json=body)
    assert created.status_code == 201, created.text
    flow_id = created.json()["flow"]["id"]
    async with app.http(cookies={store.SESSION_COOKIE: cookie}) as browser:
        page = await browser.get(f"/f/{flow_id}")
        assert page.status_code == 200, page.text[:300]
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf is not None
        onward = await browser.post(f"/connect/{flow_id}/continue", data={"csrf_token": csrf.group(1)})
        assert onward.status_code == 303, onward.text[:300]
        authorize_url = httpx.URL(onward.headers["location"])
        callback = server.login_without_browser(str(authorize_url), sub)
        if tamper is not None:
            return await browser.get(tamper(callback).path, params=tamper(callback).params)
        back = await browser.get(callback.path, params=callback.params)
        assert back.status_code == 303, back.text[:500]
        assert back.headers["location"].startswith("/connect/done/")
    async with app.http(client.api_key) as api:
        answer = (await api.get(f"/v1/flows/{flow_id}")).json()
    assert answer["flow"]["status"] == "completed", answer
    return Connected(name, client, iss, sub, answer["result"], authorize_url, callback)


async def connected(app: RunningApp, server: OAuthServer, catalog_key: str, **kwargs: Any) -> Connected:
    done = await connect(app, server, catalog_key, **kwargs)
    assert isinstance(done, Connected)
    return done


async def profiled(
    app: RunningApp, server: OAuthServer, monkeypatch: pytest.MonkeyPatch, catalog_key: str, profile: str, **kwargs: Any
) -> Connected:
    """``server`` answers as ``profile``, ``catalog_key``'s entry points at it, and a person connects."""
    server.configure(profile=profile)
    return await connected(app, server, pointed(catalog_key, server, monkeypatch), **kwargs)


async def token(app: RunningApp, done: Connected) -> httpx.Response:
    async with app.http(done.client.api_key) as api:
        return await api.get(f"/v1/connections/{done.provider}/token", params={"iss": done.iss, "sub": done.sub})


async def refresh(app: RunningApp, done: Connected) -> None:
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE authorizations SET expires_at = now() + interval '5 seconds' WHERE connection_id = :c"),
            {"c": done.connection_id},
        )
        await session.commit()
    assert await app.state.connections.refresh_by_id(done.connection_id) is not None


async def revoke(app: RunningApp, done: Connected) -> None:
    async with app.http(done.client.api_key) as api:
        gone = await api.delete(f"/v1/connections/{done.provider}", params={"iss": done.iss, "sub": done.sub})
    assert gone.status_code == 200, gone.text
    assert (await token(app, done)).status_code == 404


def served(server: OAuthServer, access_token: str) -> str:
    """The provider's own record of a token it issued: its status."""
    return server.token(access_token).status


async def round_trip(app: RunningApp, server: OAuthServer, done: Connected, *, revocation: bool) -> tuple[str, str]:
    """Token, refresh, token again, revoke: the first and the refreshed access token."""
    first = await token(app, done)
    assert first.status_code == 200, first.text
    before = first.json()["access_token"]
    assert served(server, before) == "active"
    await refresh(app, done)
    assert server.token_calls("refresh_token") == 1
    after = (await token(app, done)).json()["access_token"]
    assert after != before
    assert served(server, after) == "active"
    await revoke(app, done)
    assert len(server.revocations()) == (1 if revocation else 0)
    if revocation:
        assert served(server, after) == "revoked"
    return before, after


async def test_client_key_and_comma_scopes_tiktok(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "tiktok", "client_key", scopes=["user.info.basic", "video.list"])
    assert "client_key" in done.authorize_url.params and "client_id" not in done.authorize_url.params
    assert done.authorize_url.params["scope"] == "user.info.basic,video.list"
    assert done.result["account_id"] == fresh.account_id(done.sub)
    assert done.result["account_login"] == done.sub
    assert done.result["scopes"] == ["user.info.basic", "video.list"]
    assert {r.auth_method for r in fresh.token_requests()} == {"client_secret_post"}
    await round_trip(app, fresh, done, revocation=True)
    assert fresh.revocations()[0].client_id == CLIENT_ID


async def test_nested_token_answer_slack(app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    done = await profiled(app, fresh, monkeypatch, "slack", "nested_token", scopes=["channels:read", "users:read"])
    # The account is named inside the answer (authed_user.id), the workspace by team.name.
    assert done.result["account_id"] == f"U{fresh.account_id(done.sub)[-9:]}"
    assert done.result["account_login"] == "Acme"
    assert done.result["scopes"] == ["channels:read", "users:read"]
    await round_trip(app, fresh, done, revocation=False)


async def test_slack_refusals_in_a_200_answer_are_refusals(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "slack", "nested_token")
    fresh.fail_next_refresh("invalid_grant")
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE authorizations SET expires_at = now() - interval '1 second' WHERE connection_id = :c"),
            {"c": done.connection_id},
        )
        await session.commit()
    refused = await token(app, done)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "reauthorization_required"


async def test_callback_realm_id_quickbooks(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "quickbooks", "callback_params")
    realm = done.callback.params["realmId"]
    assert realm.startswith("9130")
    # The company id from the callback is the connection's account.
    assert done.result["account_id"] == realm
    assert {r.auth_method for r in fresh.token_requests()} == {"client_secret_basic"}
    await round_trip(app, fresh, done, revocation=False)


async def test_json_token_body_square(app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    done = await profiled(app, fresh, monkeypatch, "square", "json_body")
    assert done.result["account_id"] == f"M{fresh.account_id(done.sub)[-10:]}"
    await round_trip(app, fresh, done, revocation=False)


async def test_instance_url_in_the_answer_salesforce(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "salesforce", "instance_url")
    assert done.authorize_url.params["prompt"] == "consent"
    identity = f"{fresh.base_url}/id/00D000000000001/{fresh.account_id(done.sub)}"
    assert done.result["account_id"] == identity
    # The org's API host travels with the token, as the entry's token_answer.metadata declares.
    got = await token(app, done)
    assert got.json()["metadata"] == {"instance_url": f"{fresh.base_url}/instance", "id": identity}
    assert "metadata" not in done.result
    await round_trip(app, fresh, done, revocation=True)
    async with app.state.sessions() as session:
        kept = await session.execute(
            text("SELECT metadata FROM authorizations WHERE connection_id = :c"), {"c": done.connection_id}
        )
        assert kept.scalar_one() == {"instance_url": f"{fresh.base_url}/instance", "id": identity}


async def test_audience_parameter_atlassian(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "atlassian", "audience")
    assert done.authorize_url.params["audience"] == "api.atlassian.com"
    assert done.result["account_id"] == fresh.account_id(done.sub)
    await round_trip(app, fresh, done, revocation=False)


async def test_rotating_refresh_tokens_with_pkce_required_x(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = pointed("x", fresh, monkeypatch)
    done = await connected(app, fresh, key)
    assert done.authorize_url.params["code_challenge_method"] == "S256"
    assert done.result["account_login"] == done.sub
    first = (await token(app, done)).json()["access_token"]
    original_refresh = next(t for t in fresh.tokens() if t.kind == "refresh" and t.status == "active")
    await refresh(app, done)
    # The refresh token was spent and replaced: the provider holds the old one as used.
    assert fresh.token(original_refresh.token).status == "used"
    await refresh(app, done)
    assert fresh.token_calls("refresh_token") == 2
    assert served(fresh, first) == "active"
    await revoke(app, done)
    assert len(fresh.revocations()) == 1


async def test_no_refresh_token_linkedin(app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh.configure(issue_refresh_tokens=False)
    try:
        key = pointed("linkedin", fresh, monkeypatch)
        done = await connected(app, fresh, key)
        got = await token(app, done)
        assert got.status_code == 200, got.text
        assert served(fresh, got.json()["access_token"]) == "active"
        async with app.state.sessions() as session:
            await session.execute(
                text("UPDATE authorizations SET expires_at = now() - interval '1 second' WHERE connection_id = :c"),
                {"c": done.connection_id},
            )
            await session.commit()
        # No refresh token: the person must connect again; the provider is never asked to refresh.
        expired = await token(app, done)
        assert expired.status_code == 409, expired.text
        assert fresh.token_calls("refresh_token") == 0
        # A connection that still works is revoked at the provider too.
        other = await connected(app, fresh, key)
        live = (await token(app, other)).json()["access_token"]
        await revoke(app, other)
        assert len(fresh.revocations()) == 1
        assert served(fresh, live) == "revoked"
    finally:
        fresh.configure(issue_refresh_tokens=True)


async def test_form_answer_and_expiring_refresh_github(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh.configure(profile="form_answer", refresh_token_ttl=15897600)
    try:
        key = pointed("github", fresh, monkeypatch)
        done = await connected(app, fresh, key)
        assert done.result["account_login"] == done.sub
        async with app.state.sessions() as session:
            ends = await session.execute(
                text(
                    "SELECT extract(epoch FROM refresh_expires_at - now()) FROM authorizations WHERE connection_id = :c"
                ),
                {"c": done.connection_id},
            )
            left = float(ends.scalar_one())
        # The refresh token's own end, from refresh_token_expires_in (about 184 days).
        assert 15897600 - 60 < left <= 15897600
        await round_trip(app, fresh, done, revocation=False)
    finally:
        fresh.configure(refresh_token_ttl=None)


async def test_signed_callback_shopify(app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Shopify signs its callback (no iss there) and issues offline tokens without a refresh token.
    fresh.configure(profile="shop_hmac", issue_refresh_tokens=False, authorization_response_iss=None)
    fresh.register_client(CLIENT_ID, CLIENT_SECRET)
    try:
        key = pointed("shopify", fresh, monkeypatch, values={"shop": "acme-store"})
        shop = {"shop": "acme-store"}
        done = await connected(app, fresh, key, scopes=["read_orders", "read_products"], params=shop)
        assert done.authorize_url.path == "/acme-store.myshopify.com/admin/oauth/authorize"
        assert done.authorize_url.params["scope"] == "read_orders,read_products"
        assert done.callback.params["shop"] == "acme-store.myshopify.com"
        assert done.result["account_id"] == fresh.account_id(done.sub)
        assert done.result["scopes"] == ["read_orders", "read_products"]
        got = await token(app, done)
        assert got.status_code == 200, got.text
        await revoke(app, done)
        exchanges = fresh.token_calls("authorization_code")

        # A callback whose shop was changed on the way keeps its old signature: refused, and the
        # code never reaches the provider.
        def other_shop(url: httpx.URL) -> httpx.URL:
            return url.copy_set_param("shop", "evil-store.myshopify.com")

        refused = await connect(app, fresh, key, tamper=other_shop, params=shop)
        assert isinstance(refused, httpx.Response)
        assert refused.status_code == 400, refused.text[:300]
        assert "This sign-in response is not valid" in refused.text
        unsigned = await connect(app, fresh, key, tamper=lambda url: url.copy_remove_param("hmac"), params=shop)
        assert isinstance(unsigned, httpx.Response)
        assert unsigned.status_code == 400
        assert fresh.token_calls("authorization_code") == exchanges
    finally:
        fresh.configure(issue_refresh_tokens=True)


async def test_pkce_refused_by_an_operators_entry(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No built-in provider documents refusing PKCE; an operator's entry can say so.
    fresh.configure(profile="pkce_refused")
    document = {
        "display_name": "Acme Legacy",
        "auth_mode": "oauth2",
        "source_url": "https://developer.acme.example/oauth",
        "endpoints": {
            "authorization": "https://auth.acme.example/oauth/authorize",
            "token": "https://auth.acme.example/oauth/token",
            "revocation": "https://auth.acme.example/oauth/revoke",
        },
        "pkce": "refused",
        "account": {"endpoint": "https://api.acme.example/me", "id_field": "id", "login_field": "login"},
    }
    assert lint_document("acme-legacy", document) == []
    key = pointed("acme-legacy", fresh, monkeypatch, document=document)
    done = await connected(app, fresh, key)
    assert "code_challenge" not in done.authorize_url.params
    assert done.result["account_login"] == done.sub
    await round_trip(app, fresh, done, revocation=True)


async def test_token_server_from_the_callback_zoho(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The callback names the data centre's accounts server: this server under another name
    # (localhost), the one host the entry allows once pointed.
    fresh.configure(profile="accounts_server")
    document = read_document(BUILT_IN_DIR / "zoho.yaml")
    document["token_server"]["hosts"] = ["localhost"]
    key = pointed("zoho", fresh, monkeypatch, document=document)
    done = await connected(app, fresh, key)
    server = f"http://localhost:{urlsplit(fresh.base_url).port}"
    assert done.callback.params["accounts-server"] == server
    got = await token(app, done)
    assert got.json()["metadata"] == {"accounts-server": server, "location": "eu"}
    before, after = await round_trip(app, fresh, done, revocation=True)
    # The code, the refresh and the revocation all went to the server the callback named.
    assert [r.host for r in fresh.token_requests()] == [server.removeprefix("http://")] * 2
    assert before != after

    # A callback naming any other server is refused before the code goes anywhere.
    exchanges = fresh.token_calls("authorization_code")
    for elsewhere in ("https://accounts.zoho.evil.example", "http://localhost.evil.example", f"{server}/x"):

        def moved(url: httpx.URL, to: str = elsewhere) -> httpx.URL:
            return url.copy_set_param("accounts-server", to)

        refused = await connect(app, fresh, key, tamper=moved)
        assert isinstance(refused, httpx.Response)
        assert refused.status_code == 400, refused.text[:300]
    assert fresh.token_calls("authorization_code") == exchanges


async def test_post_token_lookups_atlassian_and_xero(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "atlassian", "audience")
    account = fresh.account_id(done.sub)
    got = await token(app, done)
    assert got.json()["metadata"] == {
        "cloud_id": f"cloud-{account}",
        "site_url": "https://acme.atlassian.net",
        "site_name": "acme",
    }
    await round_trip(app, fresh, done, revocation=False)
    # The refresh kept what the lookup found.
    async with app.state.sessions() as session:
        kept = await session.execute(
            text("SELECT metadata FROM authorizations WHERE connection_id = :c"), {"c": done.connection_id}
        )
        assert kept.scalar_one()["cloud_id"] == f"cloud-{account}"

    fresh.configure(profile=None)
    fresh.reset_stats()
    xero = await connected(app, fresh, pointed("xero", fresh, monkeypatch))
    answer = (await token(app, xero)).json()
    assert answer["metadata"] == {
        "tenant_id": f"tenant-{fresh.account_id(xero.sub)}",
        "tenant_name": "Acme Ltd",
        "tenant_type": "ORGANISATION",
    }
    await round_trip(app, fresh, xero, revocation=True)


async def test_user_token_in_authed_user_slack(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await profiled(app, fresh, monkeypatch, "slack_user", "user_token", scopes=["search:read", "users:read"])
    # The scopes go as user_scope; the answer's only token is the person's, under authed_user.
    assert done.authorize_url.params["user_scope"] == "search:read,users:read"
    assert "scope" not in done.authorize_url.params
    assert done.result["account_id"] == f"U{fresh.account_id(done.sub)[-9:]}"
    assert done.result["scopes"] == ["search:read", "users:read"]
    got = (await token(app, done)).json()
    assert got["metadata"] == {"team.id": "T0001", "team.name": "Acme"}
    await round_trip(app, fresh, done, revocation=False)


async def test_connection_parameters_zendesk(
    app: RunningApp, fresh: OAuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zendesk's endpoints are templated from the account's subdomain: the MCP server names it, or
    the person enters it on the connect page (checked on the server, the domain shown before going
    on); it fills the templates only, and the connection keeps it for the refresh."""
    key = pointed("zendesk", fresh, monkeypatch, values={"subdomain": "acme"})
    iss, sub, name, cookie = await signed_in_subject(app, fresh, key)
    client = await new_server_client(app)
    body: dict[str, Any] = {"subject": {"iss": iss, "sub": sub}, "kind": "oauth_connect", "provider": name}
    async with app.http(client.api_key) as api:
        for bad in ("evil.example/x", "a.b", "", 7):
            refused = await api.post("/v1/flows", json={**body, "params": {"subdomain": bad}})
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == "invalid_parameter"
        given = await api.post("/v1/flows", json={**body, "params": {"subdomain": "acme"}})
        asked = await api.post("/v1/flows", json=body)
    assert given.status_code == asked.status_code == 201
    given_id, asked_id = given.json()["flow"]["id"], asked.json()["flow"]["id"]
    async with app.http(cookies={store.SESSION_COOKIE: cookie}) as browser:
        # The server named the subdomain: no field, the domain shown, straight on to Zendesk.
        page = await browser.get(f"/f/{given_id}")
        assert page.status_code == 200 and 'name="param_subdomain"' not in page.text
        csrf_match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf_match is not None
        csrf = csrf_match.group(1)
        onward = await browser.post(f"/connect/{given_id}/continue", data={"csrf_token": csrf})
        assert onward.status_code == 303, onward.text[:300]
        assert httpx.URL(onward.headers["location"]).path == "/acme.zendesk.com/oauth/authorizations/new"

        # The server did not: the person is asked, and a value is checked on the server.
        page = await browser.get(f"/f/{asked_id}")
        assert page.status_code == 200
        assert 'id="param_subdomain" name="param_subdomain"' in page.text and 'id="continue"' not in page.text
        # Nothing leaves for the provider from this page: its form posts here only.
        assert page.headers["content-security-policy"].endswith("form-action 'self'")
        for bad in ("", "evil.example", "a/b", "acme.zendesk.com@evil.example"):
            wrong = await browser.post(
                f"/connect/{asked_id}/continue", data={"csrf_token": csrf, "param_subdomain": bad}
            )
            assert wrong.status_code == 400, (bad, wrong.text[:300])
            assert 'aria-invalid="true" aria-describedby="error_subdomain help_subdomain"' in wrong.text
            assert 'id="error_subdomain"' in wrong.text
        # Even a value the browser calls confirmed is checked again.
        forged = await browser.post(
            f"/connect/{asked_id}/continue", data={"csrf_token": csrf, "param_subdomain": "x/y", "confirmed": "1"}
        )
        assert forged.status_code == 400
        checked = await browser.post(
            f"/connect/{asked_id}/continue", data={"csrf_token": csrf, "param_subdomain": "acme"}
        )
        assert checked.status_code == 200, checked.text[:300]
        assert 'id="parameters-check"' in checked.text
        assert '<input type="hidden" name="param_subdomain" value="acme">' in checked.text
        assert fresh.stats().authorize_calls == 0
        onward = await browser.post(
            f"/connect/{asked_id}/continue",
            data={"csrf_token": csrf, "param_subdomain": "acme", "confirmed": "1"},
        )
        assert onward.status_code == 303, onward.text[:300]
        authorize_url = httpx.URL(onward.headers["location"])
        assert authorize_url.path == "/acme.zendesk.com/oauth/authorizations/new"
        callback = fresh.login_without_browser(str(authorize_url), sub)
        back = await browser.get(callback.path, params=callback.params)
        assert back.status_code == 303, back.text[:500]
    async with app.http(client.api_key) as api:
        answer = (await api.get(f"/v1/flows/{asked_id}")).json()
    assert answer["flow"]["status"] == "completed", answer
    done = Connected(name, client, iss, sub, answer["result"], authorize_url, callback)
    assert done.result["account_id"] == fresh.account_id(sub)
    async with app.state.sessions() as session:
        kept = await session.execute(
            text(
                "SELECT c.parameters, a.parameters FROM connections c JOIN authorizations a ON a.connection_id = c.id "
                "WHERE c.id = :c"
            ),
            {"c": done.connection_id},
        )
        assert kept.one() == ({"subdomain": "acme"}, {"subdomain": "acme"})
    # The refresh goes to the same subdomain's token endpoint (the only path the server answers).
    await round_trip(app, fresh, done, revocation=False)
