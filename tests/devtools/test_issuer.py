"""Dev ID behaves as the OIDC issuer elicitd expects: discovery, a sign-in page, codes bound to the
client, redirect URI and PKCE verifier and used once, ES256 ID tokens with the nonce, RFC 9207
``iss`` on every redirect back, and errors where RFC 6749 puts them."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx
from joserfc import jwt
from joserfc.jwk import KeySet

from service.devtools.mount import DevTools
from tests.support.dev_tools import request_id
from tests.support.oauth_server import PkcePair, pkce_pair


def authorize_params(tools: DevTools, pkce: PkcePair, **changes: str) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": "elicitd",
        "redirect_uri": f"{tools.base}/auth/callback",
        "scope": "openid",
        "state": "state-1",
        "nonce": "nonce-1",
        "code_challenge": pkce.challenge,
        "code_challenge_method": "S256",
    }
    params.update(changes)
    return {k: v for k, v in params.items() if v != ""}


def query_of(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    return {k: v[0] for k, v in parse_qs(urlsplit(response.headers["location"]).query).items()}


async def sign_in(http: httpx.AsyncClient, tools: DevTools, pkce: PkcePair, username: str) -> httpx.Response:
    iss = tools.issuer.issuer
    page = await http.get(f"{iss}/authorize", params=authorize_params(tools, pkce))
    assert page.status_code == 200
    return await http.post(f"{iss}/authorize", data={"request": request_id(page), "username": username})


def secret(tools: DevTools) -> str:
    return tools.issuer.keys.id_client_secret


async def exchange(
    http: httpx.AsyncClient, tools: DevTools, code: str, verifier: str, **changes: str
) -> httpx.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": f"{tools.base}/auth/callback",
        "code_verifier": verifier,
    }
    form.update(changes)
    return await http.post(f"{tools.issuer.issuer}/token", data=form, auth=("elicitd", secret(tools)))


async def test_discovery_names_the_issuer_its_endpoints_and_rfc_9207(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    iss = dev_tools.issuer.issuer
    metadata = (await http.get(f"{iss}/.well-known/openid-configuration")).json()
    assert metadata["issuer"] == iss == f"{dev_tools.base}/dev/id"
    assert metadata["authorization_endpoint"] == f"{iss}/authorize"
    assert metadata["jwks_uri"] == f"{iss}/jwks"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["authorization_response_iss_parameter_supported"] is True


async def test_a_sign_in_gives_a_code_for_one_es256_id_token_with_the_nonce(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    pkce = pkce_pair()
    back = query_of(await sign_in(http, dev_tools, pkce, " Alice "))
    assert back["state"] == "state-1"
    assert back["iss"] == dev_tools.issuer.issuer
    answer = await exchange(http, dev_tools, back["code"], pkce.verifier)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    keys = KeySet.import_key_set((await http.get(f"{dev_tools.issuer.issuer}/jwks")).json())
    token = jwt.decode(answer.json()["id_token"], keys, algorithms=["ES256"])
    assert (token.header["kid"], token.header["typ"]) == (dev_tools.issuer.keys.kid, "JWT")
    # The access token is an RFC 9068 one, as elicitd requires of a subject token.
    access = jwt.decode(answer.json()["access_token"], keys, algorithms=["ES256"])
    assert access.header["typ"] == "at+jwt"
    claims = token.claims
    assert (claims["iss"], claims["sub"], claims["aud"], claims["nonce"]) == (
        dev_tools.issuer.issuer,
        "alice",
        "elicitd",
        "nonce-1",
    )
    assert claims["exp"] > time.time() > claims["iat"] - 5
    again = await exchange(http, dev_tools, back["code"], pkce.verifier)
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")


async def test_a_code_needs_its_verifier_and_redirect_uri_and_the_client_secret(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    pkce = pkce_pair()
    code = query_of(await sign_in(http, dev_tools, pkce, "bob"))["code"]
    wrong_verifier = await exchange(http, dev_tools, code, pkce_pair().verifier)
    assert (wrong_verifier.status_code, wrong_verifier.json()["error"]) == (400, "invalid_grant")
    # The failed attempt used the code up, as a code is single-use whatever the outcome.
    assert (await exchange(http, dev_tools, code, pkce.verifier)).status_code == 400

    code = query_of(await sign_in(http, dev_tools, pkce, "bob"))["code"]
    elsewhere = await exchange(http, dev_tools, code, pkce.verifier, redirect_uri="http://127.0.0.1:1/auth/callback")
    assert (elsewhere.status_code, elsewhere.json()["error"]) == (400, "invalid_grant")

    code = query_of(await sign_in(http, dev_tools, pkce, "bob"))["code"]
    form = {"grant_type": "authorization_code", "code": code, "code_verifier": pkce.verifier}
    refused = await http.post(f"{dev_tools.issuer.issuer}/token", data=form, auth=("elicitd", "not-the-secret"))
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_client")


async def test_an_unknown_client_or_redirect_uri_gets_a_page_and_never_a_redirect(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    pkce = pkce_pair()
    iss = dev_tools.issuer.issuer
    for changes in ({"client_id": "someone-else"}, {"redirect_uri": "https://evil.example/callback"}):
        page = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce, **changes))
        assert page.status_code == 400
        assert "location" not in page.headers
        assert 'id="problem"' in page.text


async def test_other_request_errors_go_back_to_the_client_with_state_and_iss(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    pkce = pkce_pair()
    iss = dev_tools.issuer.issuer
    no_pkce = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce, code_challenge_method=""))
    back = query_of(no_pkce)
    assert (back["error"], back["state"], back["iss"]) == ("invalid_request", "state-1", iss)
    plain = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce, code_challenge_method="plain"))
    assert query_of(plain)["error"] == "invalid_request"
    other_scope = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce, scope="openid admin"))
    assert query_of(other_scope)["error"] == "invalid_scope"
    silent = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce, prompt="none"))
    assert query_of(silent)["error"] == "login_required"


async def test_cancel_answers_access_denied_and_a_bad_name_keeps_the_page(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    pkce = pkce_pair()
    iss = dev_tools.issuer.issuer
    page = await http.get(f"{iss}/authorize", params=authorize_params(dev_tools, pkce))
    pending = request_id(page)
    bad = await http.post(f"{iss}/authorize", data={"request": pending, "username": "Bad Name!"})
    assert bad.status_code == 400
    assert "A user name is" in bad.text
    cancelled = await http.post(f"{iss}/authorize", data={"request": pending, "cancel": "1"})
    assert (query_of(cancelled)["error"], query_of(cancelled)["iss"]) == ("access_denied", iss)
    used = await http.post(f"{iss}/authorize", data={"request": pending, "username": "alice"})
    assert used.status_code == 400
    assert "has expired" in used.text


async def test_the_signed_in_name_is_remembered_for_demo_files_only(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    answer = await sign_in(http, dev_tools, pkce_pair(), "carol")
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("elicitd_dev_user=carol;")
    assert "Path=/dev" in cookie
    assert "HttpOnly" in cookie


async def test_mint_gives_an_access_token_for_an_audience(dev_tools: DevTools, http: httpx.AsyncClient) -> None:
    iss = dev_tools.issuer.issuer
    minted = await http.post(f"{iss}/mint", json={"sub": "alice", "audience": "http://127.0.0.1:9000/mcp"})
    assert minted.status_code == 200
    claims = dev_tools.issuer.verify_access_token(minted.json()["access_token"], "http://127.0.0.1:9000/mcp")
    assert claims is not None
    keys = KeySet.import_key_set((await http.get(f"{iss}/jwks")).json())
    assert jwt.decode(minted.json()["access_token"], keys, algorithms=["ES256"]).header["typ"] == "at+jwt"
    assert (claims["iss"], claims["sub"], claims["preferred_username"]) == (iss, "alice", "alice")
    assert dev_tools.issuer.verify_access_token(minted.json()["access_token"], "http://127.0.0.1:9001/mcp") is None
    no_audience = await http.post(f"{iss}/mint", json={"sub": "alice"})
    assert (no_audience.status_code, no_audience.json()["error"]) == (400, "invalid_request")
    info = await http.get(f"{iss}/userinfo", headers={"Authorization": f"Bearer {minted.json()['access_token']}"})
    assert info.json() == {"sub": "alice", "name": "Alice", "preferred_username": "alice"}
    assert (await http.get(f"{iss}/userinfo", headers={"Authorization": "Bearer x.y.z"})).status_code == 401
