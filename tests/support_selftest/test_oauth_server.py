"""Proves the end-to-end harness itself: the test OAuth server and the headless browser.

These run without elicitd. The test plays the OAuth client: a throwaway HTTP server on loopback
is the redirect target, the browser logs in, and the test exchanges the code itself. If any of
these fail, an end-to-end failure elsewhere could be the harness's fault, so they assert exact
values rather than "something came back".
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError
from joserfc.jwk import KeySet, KeySetSerialization
from playwright.async_api import Browser, Page

# These modules are also loaded as plugins below; registering them first lets pytest rewrite
# their asserts instead of warning that they were imported too early.
pytest.register_assert_rewrite("tests.support.browser", "tests.support.oauth_server")

from tests.support.browser import (  # noqa: E402 (after register_assert_rewrite on purpose)
    ChromiumNotFoundError,
    chromium_executable,
    deny_at_issuer,
    is_login_page,
    login_at_issuer,
    new_context,
    save_screenshot,
)
from tests.support.oauth_server import (  # noqa: E402 (after register_assert_rewrite on purpose)
    NodeNotFoundError,
    OAuthServer,
    OAuthServerFactory,
    find_node,
    pkce_pair,
)

# Fixtures (oauth_server, oauth_server_factory, chromium_browser, browser_context, browser_page)
# and the failure-screenshot hook, loaded the same way a conftest would load them.
pytest_plugins = ["tests.support.oauth_server", "tests.support.browser"]

CLIENT_ID = "selftest-client"
CLIENT_SECRET = "selftest-secret"


class _CallbackHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        target = urlsplit(self.path)
        if target.path != "/callback":  # e.g. the browser's own /favicon.ico request
            self.send_error(404)
            return
        assert isinstance(self.server, _CallbackServer)
        self.server.queries.append(parse_qs(target.query))
        body = b"<!doctype html><title>callback</title><p id='done'>callback received</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""


class _CallbackServer(http.server.ThreadingHTTPServer):
    """The callback's HTTP server, which keeps every query string the handler received."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CallbackHandler)
        self.queries: list[dict[str, list[str]]] = []


@dataclass
class Callback:
    """The OAuth client's redirect target: records every query string it receives."""

    url: str
    queries: list[dict[str, list[str]]]

    def last(self) -> dict[str, list[str]]:
        assert self.queries, "the browser never reached the callback"
        return self.queries[-1]


@pytest.fixture
def callback() -> Iterator[Callback]:
    server = _CallbackServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Callback(f"http://127.0.0.1:{server.server_address[1]}/callback", server.queries)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def server(oauth_server: OAuthServer, callback: Callback) -> OAuthServer:
    """The shared server, reset, with this module's confidential client registered."""
    oauth_server.reset()
    oauth_server.register_client(CLIENT_ID, CLIENT_SECRET, [callback.url])
    return oauth_server


def _basic() -> httpx.BasicAuth:
    return httpx.BasicAuth(CLIENT_ID, CLIENT_SECRET)


def exchange(server: OAuthServer, code: str, verifier: str, redirect_uri: str) -> httpx.Response:
    return server.http.post(
        "/token",
        auth=_basic(),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": redirect_uri,
        },
    )


def refresh(server: OAuthServer, refresh_token: str) -> httpx.Response:
    return server.http.post(
        "/token", auth=_basic(), data={"grant_type": "refresh_token", "refresh_token": refresh_token}
    )


def obtain_tokens(
    server: OAuthServer, callback: Callback, username: str, scope: str = "openid files:read"
) -> dict[str, Any]:
    """The whole code flow over plain HTTP, for tests about the token endpoint only."""
    pkce = pkce_pair()
    url = server.authorize_url(
        client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce.challenge, scope=scope, state="s"
    )
    location = server.login_without_browser(url, username)
    code = location.params["code"]
    response = exchange(server, code, pkce.verifier, callback.url)
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


def verify_id_token(server: OAuthServer, id_token: str) -> dict[str, Any]:
    jwks = server.jwks()
    keys = KeySet.import_key_set(cast("KeySetSerialization", jwks))
    decoded = jwt.decode(id_token, keys, algorithms=["RS256"])
    assert decoded.header["kid"] == jwks["keys"][0]["kid"]
    return dict(decoded.claims)


# -- discovery ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_discovery_document_describes_an_oidc_issuer_with_pkce_and_rfc9207(server: OAuthServer) -> None:
    doc = server.discovery()
    issuer = server.issuer
    assert issuer.startswith("http://127.0.0.1:")
    assert doc["issuer"] == issuer
    assert doc["authorization_endpoint"] == f"{issuer}/authorize"
    assert doc["token_endpoint"] == f"{issuer}/token"
    assert doc["userinfo_endpoint"] == f"{issuer}/userinfo"
    assert doc["jwks_uri"] == f"{issuer}/jwks"
    assert doc["revocation_endpoint"] == f"{issuer}/revoke"
    assert doc["response_types_supported"] == ["code"]
    assert doc["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["id_token_signing_alg_values_supported"] == ["RS256"]
    assert doc["authorization_response_iss_parameter_supported"] is True
    assert server.http.get("/.well-known/oauth-authorization-server").json() == doc
    keys = server.jwks()["keys"]
    assert len(keys) == 1
    assert {keys[0]["kty"], keys[0]["alg"], keys[0]["use"]} == {"RSA", "RS256", "sig"}
    assert "d" not in keys[0]


# -- browser ---------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.browser
async def test_login_page_asks_for_a_username_and_offers_deny(
    server: OAuthServer, callback: Callback, browser_page: Page
) -> None:
    url = server.authorize_url(
        client_id=CLIENT_ID,
        redirect_uri=callback.url,
        code_challenge=pkce_pair().challenge,
        scope="openid files:read",
    )
    response = await browser_page.goto(url)
    assert response is not None
    assert response.status == 200
    assert await is_login_page(browser_page)
    username = browser_page.locator("form#login input#username")
    assert await username.get_attribute("name") == "username"
    assert await username.get_attribute("type") == "text"
    assert await browser_page.locator("label[for=username]").inner_text() == "Username"
    assert await browser_page.locator("button#approve").inner_text() == "Sign in and allow"
    assert await browser_page.locator("button#deny").inner_text() == "Deny"
    assert await browser_page.locator("#scopes li").all_inner_texts() == ["openid", "files:read"]
    path = await save_screenshot(browser_page, "selftest-login-page")
    assert path.is_file()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.asyncio
@pytest.mark.browser
async def test_browser_code_flow_with_pkce_yields_a_verifiable_id_token_and_api_access(
    server: OAuthServer, callback: Callback, browser_page: Page
) -> None:
    pkce = pkce_pair()
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    url = server.authorize_url(
        client_id=CLIENT_ID,
        redirect_uri=callback.url,
        code_challenge=pkce.challenge,
        scope="openid profile files:read",
        state=state,
        nonce=nonce,
    )
    await browser_page.goto(url)
    await login_at_issuer(browser_page, "alice", issuer=server.issuer)

    assert browser_page.url.startswith(f"{callback.url}?")
    assert await browser_page.locator("#done").inner_text() == "callback received"
    query = callback.last()
    assert set(query) == {"code", "state", "iss"}
    assert query["state"] == [state]
    assert query["iss"] == [server.issuer]
    code = query["code"][0]

    response = exchange(server, code, pkce.verifier, callback.url)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    tokens = response.json()
    assert set(tokens) == {"access_token", "token_type", "expires_in", "scope", "refresh_token", "id_token"}
    assert tokens["token_type"] == "Bearer"
    assert tokens["expires_in"] == 3600
    assert tokens["scope"] == "openid profile files:read"

    claims = verify_id_token(server, tokens["id_token"])
    assert claims["iss"] == server.issuer
    assert claims["sub"] == "alice"
    assert claims["aud"] == CLIENT_ID
    assert claims["nonce"] == nonce
    assert claims["exp"] - claims["iat"] == 300
    digest = hashlib.sha256(tokens["access_token"].encode()).digest()
    assert claims["at_hash"] == base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()

    header, payload, signature = tokens["id_token"].split(".")
    forged_claims = base64.urlsafe_b64decode(payload + "==").replace(b'"alice"', b'"mallo"')
    forged_payload = base64.urlsafe_b64encode(forged_claims).rstrip(b"=").decode()
    with pytest.raises(BadSignatureError):
        verify_id_token(server, f"{header}.{forged_payload}.{signature}")

    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    me = server.http.get("/api/me", headers=bearer)
    assert me.status_code == 200
    assert me.json() == {
        "id": "acct-alice",
        "login": "alice",
        "sub": "alice",
        "name": "Alice",
        "email": "alice@example.com",
        "scopes": ["openid", "profile", "files:read"],
        "client_id": CLIENT_ID,
    }
    files = server.http.get("/api/files", headers=bearer).json()
    assert files["account_id"] == OAuthServer.account_id("alice")
    assert files["owner"] == "alice"
    assert server.http.get("/userinfo", headers=bearer).json()["sub"] == "alice"

    stats = server.stats()
    assert stats.token_calls == {"authorization_code": 1, "refresh_token": 0}
    assert stats.authorize_calls == 1
    assert stats.login_submissions == 1
    assert [(r.grant_type, r.auth_method, r.outcome) for r in server.token_requests()] == [
        ("authorization_code", "client_secret_basic", "ok")
    ]

    # A replayed code is refused and takes down what it produced (RFC 6749 §4.1.2).
    replay = exchange(server, code, pkce.verifier, callback.url)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert server.http.get("/api/me", headers=bearer).status_code == 401


@pytest.mark.asyncio
@pytest.mark.browser
async def test_deny_redirects_with_access_denied_state_and_iss(
    server: OAuthServer, callback: Callback, browser_page: Page
) -> None:
    url = server.authorize_url(
        client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce_pair().challenge, state="st-1"
    )
    await browser_page.goto(url)
    await deny_at_issuer(browser_page, issuer=server.issuer)
    query = callback.last()
    assert query["error"] == ["access_denied"]
    assert query["state"] == ["st-1"]
    assert query["iss"] == [server.issuer]
    assert "code" not in query
    assert server.tokens() == []


@pytest.mark.asyncio
@pytest.mark.browser
async def test_two_users_in_separate_contexts_get_their_own_subject(
    server: OAuthServer, callback: Callback, chromium_browser: Browser
) -> None:
    subjects = []
    for username in ("alice", "mallory"):
        context = await new_context(chromium_browser)
        try:
            page = await context.new_page()
            pkce = pkce_pair()
            await page.goto(
                server.authorize_url(
                    client_id=CLIENT_ID,
                    redirect_uri=callback.url,
                    code_challenge=pkce.challenge,
                    nonce=username,
                )
            )
            await login_at_issuer(page, username, issuer=server.issuer)
            tokens = exchange(server, callback.last()["code"][0], pkce.verifier, callback.url).json()
            claims = verify_id_token(server, tokens["id_token"])
            subjects.append((claims["sub"], claims["nonce"]))
        finally:
            await context.close()
    assert subjects == [("alice", "alice"), ("mallory", "mallory")]


# -- authorization and token endpoint rules -------------------------------------------------------


@pytest.mark.asyncio
async def test_pkce_is_required_and_verified(server: OAuthServer, callback: Callback) -> None:
    no_pkce = server.http.get(
        "/authorize",
        params={"response_type": "code", "client_id": CLIENT_ID, "redirect_uri": callback.url, "state": "x"},
    )
    assert no_pkce.status_code == 302
    location = httpx.URL(no_pkce.headers["location"])
    assert location.params["error"] == "invalid_request"
    assert location.params["state"] == "x"
    assert location.params["iss"] == server.issuer

    plain = server.http.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": callback.url,
            "code_challenge": "a" * 43,
            "code_challenge_method": "plain",
        },
    )
    assert httpx.URL(plain.headers["location"]).params["error"] == "invalid_request"

    pkce = pkce_pair()
    url = server.authorize_url(client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce.challenge)
    code = server.login_without_browser(url, "alice").params["code"]
    wrong = exchange(server, code, pkce_pair().verifier, callback.url)
    assert wrong.status_code == 400
    assert wrong.json() == {"error": "invalid_grant", "error_description": "PKCE verification failed"}


@pytest.mark.asyncio
async def test_registered_client_needs_its_secret_and_exact_redirect_uri(
    server: OAuthServer, callback: Callback
) -> None:
    mismatch = server.http.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": f"{callback.url}/other",
            "code_challenge": pkce_pair().challenge,
            "code_challenge_method": "S256",
        },
    )
    assert mismatch.status_code == 400
    assert "location" not in mismatch.headers

    tokens = obtain_tokens(server, callback, "alice")
    bad_secret = server.http.post(
        "/token",
        auth=httpx.BasicAuth(CLIENT_ID, "wrong"),
        data={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
    )
    assert bad_secret.status_code == 401
    assert bad_secret.json()["error"] == "invalid_client"
    post_auth = server.http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
        },
    )
    assert post_auth.status_code == 200
    assert [r.auth_method for r in server.token_requests()] == [
        "client_secret_basic",
        "client_secret_basic",
        "client_secret_post",
    ]


@pytest.mark.asyncio
async def test_refresh_tokens_rotate_and_a_replayed_one_is_rejected(server: OAuthServer, callback: Callback) -> None:
    first = obtain_tokens(server, callback, "alice")
    second = refresh(server, first["refresh_token"])
    assert second.status_code == 200
    rotated = second.json()
    assert set(rotated) == {"access_token", "token_type", "expires_in", "scope", "refresh_token", "id_token"}
    assert rotated["refresh_token"] != first["refresh_token"]
    assert rotated["access_token"] != first["access_token"]
    assert server.token(first["refresh_token"]).status == "used"
    assert server.token(first["refresh_token"]).replaced_by == rotated["refresh_token"]

    replay = refresh(server, first["refresh_token"])
    assert replay.status_code == 400
    assert replay.json() == {"error": "invalid_grant", "error_description": "refresh token already used"}
    # Reuse detection (on by default) revokes the whole grant, including the newest tokens.
    assert server.token(rotated["refresh_token"]).status == "revoked"
    assert refresh(server, rotated["refresh_token"]).json()["error"] == "invalid_grant"
    assert server.token_call_counts() == {"authorization_code": 1, "refresh_token": 3}


@pytest.mark.asyncio
async def test_without_reuse_detection_the_newest_refresh_token_survives_a_replay(
    server: OAuthServer, callback: Callback
) -> None:
    server.configure(revoke_family_on_reuse=False)
    first = obtain_tokens(server, callback, "alice")
    rotated = refresh(server, first["refresh_token"]).json()
    assert refresh(server, first["refresh_token"]).json()["error"] == "invalid_grant"
    again = refresh(server, rotated["refresh_token"])
    assert again.status_code == 200


@pytest.mark.asyncio
async def test_revocation_endpoint(server: OAuthServer, callback: Callback) -> None:
    tokens = obtain_tokens(server, callback, "alice")
    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    assert server.http.get("/api/me", headers=bearer).status_code == 200

    revoked = server.http.post(
        "/revoke", auth=_basic(), data={"token": tokens["access_token"], "token_type_hint": "access_token"}
    )
    assert revoked.status_code == 200
    me = server.http.get("/api/me", headers=bearer)
    assert me.status_code == 401
    assert me.json() == {"error": "invalid_token", "error_description": "token revoked"}
    assert 'error="invalid_token"' in me.headers["www-authenticate"]
    assert refresh(server, tokens["refresh_token"]).status_code == 200  # the grant itself lives on

    other = obtain_tokens(server, callback, "bob")
    assert server.http.post("/revoke", auth=_basic(), data={"token": other["refresh_token"]}).status_code == 200
    assert refresh(server, other["refresh_token"]).json()["error"] == "invalid_grant"
    assert server.token(other["access_token"]).status == "revoked"  # RFC 7009 §2.1
    assert server.http.post("/revoke", auth=_basic(), data={"token": "never-issued"}).status_code == 200

    log = server.revocations()
    assert [(r.kind, r.known, r.revoked_count, r.auth_method) for r in log] == [
        ("access", True, 1, "client_secret_basic"),
        ("refresh", True, 2, "client_secret_basic"),
        (None, False, 0, "client_secret_basic"),
    ]
    assert server.stats().revocation_calls == 3


# -- control API ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_counters_reset_and_access_token_lifetime(server: OAuthServer, callback: Callback) -> None:
    server.set_access_token_ttl(5)
    tokens = obtain_tokens(server, callback, "alice")
    assert tokens["expires_in"] == 5
    record = server.token(tokens["access_token"])
    assert record.expires_at is not None
    assert record.expires_at - record.issued_at == pytest.approx(5)
    assert server.token_calls("authorization_code") == 1
    server.reset_stats()
    assert server.token_call_counts() == {"authorization_code": 0, "refresh_token": 0}
    assert server.token_requests() == []

    assert server.expire_access_tokens(sub="alice") == 1
    me = server.http.get("/api/me", headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert me.json()["error_description"] == "token expired"


@pytest.mark.asyncio
async def test_forced_refresh_failure(server: OAuthServer, callback: Callback) -> None:
    tokens = obtain_tokens(server, callback, "alice")
    server.fail_next_refresh()
    failed = refresh(server, tokens["refresh_token"])
    assert failed.status_code == 400
    assert failed.json()["error"] == "invalid_grant"
    # The provider has dropped the grant, as a real one would after invalid_grant.
    assert refresh(server, tokens["refresh_token"]).json()["error"] == "invalid_grant"

    other = obtain_tokens(server, callback, "bob")
    server.fail_next_refresh("server_error")
    assert refresh(server, other["refresh_token"]).status_code == 500
    assert refresh(server, other["refresh_token"]).status_code == 200


@pytest.mark.asyncio
async def test_planted_values_are_issued_verbatim(server: OAuthServer, callback: Callback) -> None:
    server.plant(access_token="LEAK-MARKER-AT", refresh_token="LEAK-MARKER-RT", code="LEAK-MARKER-CODE")
    pkce = pkce_pair()
    url = server.authorize_url(client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce.challenge)
    assert server.login_without_browser(url, "alice").params["code"] == "LEAK-MARKER-CODE"
    tokens = exchange(server, "LEAK-MARKER-CODE", pkce.verifier, callback.url).json()
    assert tokens["access_token"] == "LEAK-MARKER-AT"
    assert tokens["refresh_token"] == "LEAK-MARKER-RT"
    # One-shot: the next grant gets random values again.
    rotated = refresh(server, "LEAK-MARKER-RT").json()
    assert rotated["access_token"].startswith("at_")
    assert rotated["refresh_token"].startswith("rt_")


@pytest.mark.asyncio
async def test_authorization_response_iss_can_be_omitted_or_wrong(server: OAuthServer, callback: Callback) -> None:
    def authorize() -> httpx.URL:
        url = server.authorize_url(client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce_pair().challenge)
        return server.login_without_browser(url, "alice")

    server.configure(authorization_response_iss=None)
    assert "iss" not in authorize().params
    server.configure(authorization_response_iss="https://attacker.example")
    assert authorize().params["iss"] == "https://attacker.example"
    server.fail_next_authorize("temporarily_unavailable")
    url = server.authorize_url(client_id=CLIENT_ID, redirect_uri=callback.url, code_challenge=pkce_pair().challenge)
    forced = server.http.get(url)
    assert httpx.URL(forced.headers["location"]).params["error"] == "temporarily_unavailable"


@pytest.mark.asyncio
async def test_token_latency_exposes_a_parallel_refresh_race(server: OAuthServer, callback: Callback) -> None:
    tokens = obtain_tokens(server, callback, "alice")
    server.set_token_delay(0.3)
    data = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
    async with httpx.AsyncClient(base_url=server.base_url, auth=_basic()) as client:
        started = time.monotonic()
        responses = await asyncio.gather(client.post("/token", data=data), client.post("/token", data=data))
        elapsed = time.monotonic() - started
    assert sorted(r.status_code for r in responses) == [200, 400]
    assert elapsed >= 0.3
    assert elapsed < 0.6  # the two calls overlapped instead of queuing
    assert server.token_calls("refresh_token") == 2
    assert [r.outcome for r in server.token_requests()][-2:] == ["ok", "error"]


@pytest.mark.asyncio
async def test_mint_and_a_second_server_have_independent_keys(
    server: OAuthServer, oauth_server_factory: OAuthServerFactory
) -> None:
    minted = server.mint("carol", client_id="mcp-server", scope="openid", nonce="n1")
    claims = verify_id_token(server, minted["id_token"])
    assert (claims["iss"], claims["sub"], claims["aud"], claims["nonce"]) == (
        server.issuer,
        "carol",
        "mcp-server",
        "n1",
    )
    assert server.token_call_counts() == {"authorization_code": 0, "refresh_token": 0}

    other = oauth_server_factory()
    assert other.issuer != server.issuer
    assert other.jwks()["keys"][0]["kid"] != server.jwks()["keys"][0]["kid"]
    with pytest.raises(InvalidKeyIdError):
        verify_id_token(other, minted["id_token"])
    foreign = other.http.get("/api/me", headers={"Authorization": f"Bearer {minted['access_token']}"})
    assert foreign.status_code == 401


@pytest.mark.asyncio
async def test_minted_access_tokens_for_an_mcp_server_as_jwt_and_by_introspection(server: OAuthServer) -> None:
    jwt_token = server.mint("dana", client_id="mcp-host", scope="files", audience="https://mcp.example/", format="jwt")
    claims = verify_id_token(server, jwt_token["access_token"])
    assert (claims["iss"], claims["sub"], claims["aud"], claims["client_id"]) == (
        server.issuer,
        "dana",
        "https://mcp.example/",
        "mcp-host",
    )
    assert claims["exp"] - claims["iat"] == 3600
    expired = verify_id_token(server, server.mint("dana", format="jwt", ttl=-60)["access_token"])
    assert "aud" not in expired and expired["exp"] < time.time()
    forged = verify_id_token(server, server.mint("dana", format="jwt", iss="https://elsewhere.example")["access_token"])
    assert forged["iss"] == "https://elsewhere.example"

    server.register_client("introspector", "introspector-secret")
    opaque = server.mint("dana", audience=["https://mcp.example/", "https://other.example/"])["access_token"]
    assert server.token(opaque).audience == ["https://mcp.example/", "https://other.example/"]
    assert server.discovery()["introspection_endpoint"] == server.introspection_endpoint
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        anonymous = await client.post("/introspect", data={"token": opaque})
        wrong = await client.post("/introspect", data={"token": opaque}, auth=("introspector", "nope"))
        active = await client.post("/introspect", data={"token": opaque}, auth=("introspector", "introspector-secret"))
        server.revoke_grant(opaque)
        revoked = await client.post("/introspect", data={"token": opaque}, auth=("introspector", "introspector-secret"))
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    body = active.json()
    assert (body["active"], body["iss"], body["sub"], body["aud"]) == (
        True,
        server.issuer,
        "dana",
        ["https://mcp.example/", "https://other.example/"],
    )
    assert revoked.json() == {"active": False}
    assert server.stats().introspection_calls == 4


# -- setup errors are loud ----------------------------------------------------------------------------


def test_missing_node_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NodeNotFoundError, match=r"Node\.js 20\+"):
        find_node()
    with pytest.raises(NodeNotFoundError):
        OAuthServer().start()


def test_missing_chromium_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("ELICITD_CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(ChromiumNotFoundError, match="Debian package `chromium`"):
        chromium_executable()
    monkeypatch.delenv("ELICITD_CHROMIUM")
    assert chromium_executable() == "/usr/bin/chromium"
