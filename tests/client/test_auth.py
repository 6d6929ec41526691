"""``elicitd_client.auth.JwtVerifier`` against a real issuer (Dev ID, served on a loopback port):
what an MCP server accepts as its user's access token, and what it refuses."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt as pyjwt
import pytest

from elicitd_client.auth import JwtVerifier
from service.devtools.mount import DevTools
from tests.support.dev_tools import serving_dev_tools
from tests.support.hostile import DEEP_JSON, FAILURES, Answer, Behavior, hostile

AUDIENCE = "http://127.0.0.1:9000/mcp"


@pytest.fixture(scope="module")
async def dev_tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevTools]:
    async with serving_dev_tools(tmp_path_factory.mktemp("issuer")) as tools:
        yield tools


def claims(tools: DevTools, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    values: dict[str, Any] = {
        "iss": tools.issuer.issuer,
        "sub": "alice",
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 300,
        "scope": "files:read profile",
        "client_id": "demo-host",
    }
    values.update(changes)
    return {k: v for k, v in values.items() if v is not None}


def segment(part: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")


async def test_a_valid_token_gives_the_subject_and_keeps_the_issuer_in_claims(dev_tools: DevTools) -> None:
    verifier = JwtVerifier(dev_tools.issuer.issuer, audience=AUDIENCE)
    token = dev_tools.issuer.sign(claims(dev_tools))
    access = await verifier.verify_token(token)
    assert access is not None
    assert (access.subject, access.client_id, access.scopes, access.resource) == (
        "alice",
        "demo-host",
        ["files:read", "profile"],
        AUDIENCE,
    )
    assert access.claims is not None
    assert access.claims["iss"] == dev_tools.issuer.issuer


async def test_a_token_for_another_audience_issuer_or_time_is_refused(dev_tools: DevTools) -> None:
    verifier = JwtVerifier(dev_tools.issuer.issuer, audience=AUDIENCE, leeway=0)
    now = int(time.time())
    refused = [
        claims(dev_tools, aud="http://127.0.0.1:9001/mcp"),
        claims(dev_tools, iss="http://127.0.0.1:1/dev/id"),
        claims(dev_tools, exp=now - 5),
        claims(dev_tools, sub=None),
    ]
    for values in refused:
        assert await verifier.verify_token(dev_tools.issuer.sign(values)) is None, values
    assert await verifier.verify_token(dev_tools.issuer.sign(claims(dev_tools))) is not None
    several = JwtVerifier(dev_tools.issuer.issuer, audience=["urn:other", AUDIENCE])
    assert await several.verify_token(dev_tools.issuer.sign(claims(dev_tools))) is not None


async def test_unsigned_and_hmac_tokens_are_refused_even_when_asked_for(dev_tools: DevTools) -> None:
    verifier = JwtVerifier(dev_tools.issuer.issuer, audience=AUDIENCE, algorithms=("HS256", "none", "ES256"))
    assert verifier.algorithms == ["ES256"]
    kid = {"kid": dev_tools.issuer.keys.kid}
    hmac_token = pyjwt.encode(claims(dev_tools), "a-guessable-secret-of-32-bytes!!", algorithm="HS256", headers=kid)
    unsigned = ".".join(segment(part) for part in ({"alg": "none", "typ": "JWT", **kid}, claims(dev_tools))) + "."
    assert await verifier.verify_token(hmac_token) is None
    assert await verifier.verify_token(unsigned) is None


async def test_a_token_signed_by_a_key_the_issuer_never_published_is_refused(
    dev_tools: DevTools, tmp_path_factory: pytest.TempPathFactory
) -> None:
    verifier = JwtVerifier(dev_tools.issuer.issuer, audience=AUDIENCE)
    async with serving_dev_tools(tmp_path_factory.mktemp("stranger")) as stranger:
        forged = stranger.issuer.sign(claims(dev_tools))  # right iss and aud, wrong key
    assert await verifier.verify_token(forged) is None
    assert await verifier.verify_token("not a jwt") is None


async def test_a_broken_issuer_gets_tokens_refused_and_is_not_asked_again_at_once(dev_tools: DevTools) -> None:
    token = dev_tools.issuer.sign(claims(dev_tools))
    discovery = "/.well-known/openid-configuration"
    broken_keys: dict[str, Behavior] = {
        "/jwks-list": Answer.json([{"kty": "EC"}]),
        "/jwks-deep": DEEP_JSON,
        "/jwks-no-keys": Answer.json({"keys": "none"}),
    }
    with hostile(broken_keys) as keys:
        routes: dict[str, Behavior] = {f"{name}{discovery}": behavior for name, behavior in FAILURES.items()}
        routes[f"/list{discovery}"] = Answer.json(["jwks_uri"])
        routes.update({f"{name}{discovery}": Answer.json({"jwks_uri": f"{keys.url}{name}"}) for name in broken_keys})
        with hostile(routes) as server:
            for name in [*FAILURES, "/list", *broken_keys]:
                verifier = JwtVerifier(f"{server.url}{name}", audience=AUDIENCE, timeout=1)
                asked = len(server.requests) + len(keys.requests)
                assert [await verifier.verify_token(token) for _ in range(3)] == [None, None, None], name
                # One attempt (discovery, then the key set it names), not one per token.
                assert len(server.requests) + len(keys.requests) - asked == (2 if name in broken_keys else 1), name
