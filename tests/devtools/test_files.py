"""Demo Files behaves as the OAuth 2 provider elicitd expects: RFC 8414 metadata at the
path-inserted address, a consent screen, codes bound to client, redirect URI and verifier,
rotating refresh tokens with reuse detection, RFC 7009 revocation, and a files API that takes
only its own live access tokens."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from service.devtools.mount import DevTools
from tests.support.dev_tools import request_id
from tests.support.oauth_server import PkcePair, pkce_pair


def authorize_params(tools: DevTools, pkce: PkcePair, **changes: str) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": "elicitd",
        "redirect_uri": f"{tools.base}/connect/callback",
        "scope": "files:read",
        "state": "s-1",
        "code_challenge": pkce.challenge,
        "code_challenge_method": "S256",
    }
    params.update(changes)
    return params


def query_of(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    return {k: v[0] for k, v in parse_qs(urlsplit(response.headers["location"]).query).items()}


def client_auth(tools: DevTools) -> tuple[str, str]:
    return ("elicitd", tools.files.keys.files_client_secret)


async def connect(http: httpx.AsyncClient, tools: DevTools, account: str) -> dict[str, Any]:
    """Consent as ``account`` and trade the code: the token response."""
    pkce = pkce_pair()
    page = await http.get(f"{tools.files.issuer}/authorize", params=authorize_params(tools, pkce))
    assert page.status_code == 200
    decided = await http.post(
        f"{tools.files.issuer}/authorize",
        data={"request": request_id(page), "account": account, "decision": "allow"},
    )
    back = query_of(decided)
    assert (back["state"], back["iss"]) == ("s-1", tools.files.issuer)
    form = {
        "grant_type": "authorization_code",
        "code": back["code"],
        "redirect_uri": f"{tools.base}/connect/callback",
        "code_verifier": pkce.verifier,
    }
    answer = await http.post(f"{tools.files.issuer}/token", data=form, auth=client_auth(tools))
    assert answer.status_code == 200, answer.text
    tokens: dict[str, Any] = answer.json()
    return tokens


async def refresh(http: httpx.AsyncClient, tools: DevTools, token: str) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": token}
    return await http.post(f"{tools.files.issuer}/token", data=form, auth=client_auth(tools))


async def files(http: httpx.AsyncClient, tools: DevTools, access_token: str) -> httpx.Response:
    return await http.get(f"{tools.files.issuer}/api/files", headers={"Authorization": f"Bearer {access_token}"})


async def test_metadata_lives_where_rfc_8414_puts_it_for_an_issuer_with_a_path(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    found = await http.get(f"{dev_tools.base}/.well-known/oauth-authorization-server/dev/files")
    assert found.status_code == 200
    metadata = found.json()
    assert metadata["issuer"] == dev_tools.files.issuer == f"{dev_tools.base}/dev/files"
    assert metadata["revocation_endpoint"] == f"{dev_tools.files.issuer}/revoke"
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert (await http.get(f"{dev_tools.files.issuer}/.well-known/openid-configuration")).status_code == 404


async def test_the_consent_screen_offers_the_account_signed_in_at_dev_id(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    params = authorize_params(dev_tools, pkce_pair())
    page = await http.get(f"{dev_tools.files.issuer}/authorize", params=params, cookies={"elicitd_dev_user": "dana"})
    assert 'id="account" name="account" value="dana"' in page.text
    assert "Signed in as <strong>dana</strong> through Dev ID." in page.text
    assert "See the names and sizes of your files" in page.text
    anonymous = await http.get(f"{dev_tools.files.issuer}/authorize", params=params)
    assert 'name="account" value=""' in anonymous.text


async def test_a_connected_account_lists_its_own_files(dev_tools: DevTools, http: httpx.AsyncClient) -> None:
    tokens = await connect(http, dev_tools, "Erin")
    assert (tokens["token_type"], tokens["scope"], tokens["expires_in"]) == ("Bearer", "files:read", 600)
    listed = await files(http, dev_tools, tokens["access_token"])
    assert [f["name"] for f in listed.json()["files"]] == ["welcome.md", "meeting-notes.txt", "erin-budget.xlsx"]
    me = await http.get(
        f"{dev_tools.files.issuer}/api/me", headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    assert me.json() == {"id": "df-erin", "login": "erin", "name": "Erin"}


async def test_refresh_tokens_rotate_and_a_reused_one_ends_the_grant(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    first = await connect(http, dev_tools, "frank")
    second = await refresh(http, dev_tools, first["refresh_token"])
    assert second.status_code == 200
    assert second.json()["refresh_token"] != first["refresh_token"]
    assert (await files(http, dev_tools, second.json()["access_token"])).status_code == 200
    replayed = await refresh(http, dev_tools, first["refresh_token"])
    assert (replayed.status_code, replayed.json()["error"]) == (400, "invalid_grant")
    # Someone kept a copy of a used refresh token: every token of that grant stops working.
    assert (await files(http, dev_tools, second.json()["access_token"])).status_code == 401
    assert (await refresh(http, dev_tools, second.json()["refresh_token"])).status_code == 400
    # Another grant of the same account is not affected.
    other = await connect(http, dev_tools, "frank")
    assert (await files(http, dev_tools, other["access_token"])).status_code == 200


async def test_revoking_ends_the_grant_and_unknown_tokens_are_not_an_error(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    tokens = await connect(http, dev_tools, "gina")
    revoke = f"{dev_tools.files.issuer}/revoke"
    answer = await http.post(revoke, data={"token": tokens["refresh_token"]}, auth=client_auth(dev_tools))
    assert answer.status_code == 200
    assert (await files(http, dev_tools, tokens["access_token"])).status_code == 401
    unknown = await http.post(revoke, data={"token": "nothing"}, auth=client_auth(dev_tools))
    assert unknown.status_code == 200
    anonymous = await http.post(revoke, data={"token": "nothing"})
    assert anonymous.status_code == 401


async def test_deny_and_unknown_scopes_go_back_with_state_and_iss(dev_tools: DevTools, http: httpx.AsyncClient) -> None:
    issuer = dev_tools.files.issuer
    page = await http.get(f"{issuer}/authorize", params=authorize_params(dev_tools, pkce_pair()))
    denied = await http.post(f"{issuer}/authorize", data={"request": request_id(page), "decision": "deny"})
    assert (query_of(denied)["error"], query_of(denied)["state"], query_of(denied)["iss"]) == (
        "access_denied",
        "s-1",
        issuer,
    )
    wider = await http.get(f"{issuer}/authorize", params=authorize_params(dev_tools, pkce_pair(), scope="files:write"))
    assert query_of(wider)["error"] == "invalid_scope"


async def test_the_files_api_takes_only_live_access_tokens_of_demo_files(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    missing = await http.get(f"{dev_tools.files.issuer}/api/files")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    tokens = await connect(http, dev_tools, "hank")
    assert (await files(http, dev_tools, tokens["refresh_token"])).status_code == 401
    minted = await http.post(f"{dev_tools.issuer.issuer}/mint", json={"sub": "hank", "audience": "x"})
    assert (await files(http, dev_tools, minted.json()["access_token"])).status_code == 401


async def test_client_secret_post_works_and_a_wrong_secret_does_not(
    dev_tools: DevTools, http: httpx.AsyncClient
) -> None:
    tokens = await connect(http, dev_tools, "ivy")
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "elicitd"}
    wrong = await http.post(f"{dev_tools.files.issuer}/token", data={**form, "client_secret": "nope"})
    assert (wrong.status_code, wrong.json()["error"]) == (401, "invalid_client")
    right = await http.post(
        f"{dev_tools.files.issuer}/token", data={**form, "client_secret": dev_tools.files.keys.files_client_secret}
    )
    assert right.status_code == 200
