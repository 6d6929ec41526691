"""Proof of the subject: a server client that must prove its users gets nothing for a user whose
own access token it does not hold.

Alice and Bob connected the provider through server client A, which must prove the subject. Every
attack below is tried on every call that names a subject — create, resolve, token, revoke — and
each must be refused with the same status and code, hand out no provider token, and leave every
flow, flow event and connection row of both users exactly as it was. The same calls with Alice's
own token succeed (so the refusals are the proof's doing), and the verification cache is bounded
by the token's expiry and 60 s, on a clock the test moves.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser

from service.identity.subject_proof import LEEWAY_SECONDS, SUBJECT_TOKEN_HEADER, SubjectProver, SubjectTokenInvalid
from service.settings import Settings
from tests.support.apps import new_server_client, running_app
from tests.support.clock import ManualClock
from tests.support.oauth_server import OAuthServer, OAuthServerFactory
from tests.support.subjects import OTHER_RESOURCE, RESOURCE, World, build_world, connect, proof, snapshot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def idp() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def rogue() -> Iterator[OAuthServer]:
    """An identity provider elicitd does not trust: its own key, its own URL."""
    with OAuthServer() as server:
        yield server


@dataclass
class Scene:
    world: World
    alice: str
    bob: str
    mallory: str
    # Alice's pending flow (a wider scope), whose request state a resolve attack presents.
    pending_state: str
    pending_key: str


@pytest.fixture(scope="module")
async def scene(
    make_settings: Callable[..., Settings], idp: OAuthServer, chromium_browser: Browser
) -> AsyncIterator[Scene]:
    async with running_app(make_settings()) as app:
        world = await build_world(app, idp)
        alice, bob, mallory = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "bob", "mallory"))
        await connect(world, chromium_browser, alice)
        await connect(world, chromium_browser, bob)
        async with app.http(world.client.api_key) as http:
            wider = await http.post(
                "/v1/flows",
                json={
                    "subject": {"iss": world.iss, "sub": alice},
                    "kind": "oauth_connect",
                    "provider": world.provider,
                    "scopes": ["files:read", "files:write"],
                },
                headers=proof(world.user_token(alice)),
            )
        assert wider.status_code == 201, wider.text
        mcp = wider.json()["mcp"]
        yield Scene(
            world=world,
            alice=alice,
            bob=bob,
            mallory=mallory,
            pending_state=mcp["requestState"],
            pending_key=next(iter(mcp["inputRequests"])),
        )


async def every_call(
    scene: Scene, *, sub: str, headers: dict[str, str], api_key: str | None = None
) -> dict[str, httpx.Response]:
    """Create, resolve, token and revoke for ``sub``, each as an attacker would want it to succeed."""
    world = scene.world
    subject = {"iss": world.iss, "sub": sub}
    query = {"iss": world.iss, "sub": sub}
    async with world.app.http(api_key or world.client.api_key) as http:
        return {
            "create": await http.post(
                "/v1/flows",
                json={"subject": subject, "kind": "external", "url": "http://127.0.0.1:9/step"},
                headers=headers,
            ),
            "resolve": await http.post(
                "/v1/flows/resolve",
                json={
                    "subject": subject,
                    "request_state": scene.pending_state,
                    "input_responses": {scene.pending_key: {"action": "decline"}},
                },
                headers=headers,
            ),
            "token": await http.get(f"/v1/connections/{world.provider}/token", params=query, headers=headers),
            "revoke": await http.delete(f"/v1/connections/{world.provider}", params=query, headers=headers),
        }


def unsigned_token(claims: dict[str, Any]) -> str:
    """A JWT with ``alg: none``: what someone holding only the API key can make up."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'at+jwt'})}.{part(claims)}."


# (case, who the body names, how to make the token, expected status, code, reason)
ATTACKS: list[tuple[str, str, Callable[[Scene, OAuthServer], str | None], int, str, str | None]] = [
    ("no token", "alice", lambda s, r: None, 401, "subject_token_required", None),
    (
        "expired token",
        "alice",
        lambda s, r: s.world.user_token(s.alice, ttl=-120),
        403,
        "subject_token_invalid",
        "expired",
    ),
    (
        "another user's token",
        "alice",
        lambda s, r: s.world.user_token(s.mallory),
        403,
        "subject_token_invalid",
        "other_subject",
    ),
    (
        "token for another resource",
        "alice",
        lambda s, r: s.world.user_token(s.alice, audience=OTHER_RESOURCE),
        403,
        "subject_token_invalid",
        "audience",
    ),
    (
        "token with no audience",
        "alice",
        lambda s, r: s.world.user_token(s.alice, audience=None),
        403,
        "subject_token_invalid",
        "audience",
    ),
    (
        "token from an untrusted issuer, claiming the trusted one",
        "alice",
        lambda s, r: s.world.user_token(s.alice, server=r, iss=s.world.iss),
        403,
        "subject_token_invalid",
        "signature",
    ),
    (
        "token from an untrusted issuer, as itself",
        "alice",
        lambda s, r: s.world.user_token(s.alice, server=r),
        403,
        "subject_token_invalid",
        "other_issuer",
    ),
    (
        "a JWT of the trusted issuer that is not an access token (typ: JWT, as an ID token)",
        "alice",
        lambda s, r: s.world.user_token(s.alice, typ="JWT"),
        403,
        "subject_token_invalid",
        "token_type",
    ),
    (
        "a JWT of the trusted issuer with no typ",
        "alice",
        lambda s, r: s.world.user_token(s.alice, typ=None),
        403,
        "subject_token_invalid",
        "token_type",
    ),
    (
        "an opaque token the issuer calls active with no exp",
        "alice",
        lambda s, r: s.world.user_token(s.alice, format="opaque", expires=False),
        403,
        "subject_token_invalid",
        "claims",
    ),
    (
        "revoked opaque token (introspection: inactive)",
        "alice",
        lambda s, r: revoked_opaque(s),
        403,
        "subject_token_invalid",
        "inactive",
    ),
    (
        "Alice's own valid token, Bob in the body",
        "bob",
        lambda s, r: s.world.user_token(s.alice),
        403,
        "subject_token_invalid",
        "other_subject",
    ),
    (
        "Alice's own valid opaque token, Bob in the body",
        "bob",
        lambda s, r: s.world.user_token(s.alice, format="opaque"),
        403,
        "subject_token_invalid",
        "other_subject",
    ),
    (
        "a leaked API key and a made-up token",
        "alice",
        lambda s, r: unsigned_token({"iss": s.world.iss, "sub": s.alice, "aud": RESOURCE, "exp": time.time() + 600}),
        403,
        "subject_token_invalid",
        "signature",
    ),
    ("a leaked API key and an empty header", "alice", lambda s, r: "", 401, "subject_token_required", None),
]


def revoked_opaque(scene: Scene) -> str:
    token = scene.world.user_token(scene.alice, format="opaque")
    scene.world.idp.revoke_grant(token)
    return token


@pytest.mark.parametrize(("case", "who", "make", "status", "code", "reason"), ATTACKS, ids=[a[0] for a in ATTACKS])
async def test_an_unproven_subject_gets_nothing_and_changes_nothing(
    scene: Scene,
    rogue: OAuthServer,
    case: str,
    who: str,
    make: Callable[[Scene, OAuthServer], str | None],
    status: int,
    code: str,
    reason: str | None,
) -> None:
    world = scene.world
    users = [scene.alice, scene.bob]
    token = make(scene, rogue)
    before = await snapshot(world.app, users)
    revocations = len(world.idp.revocations())

    answers = await every_call(scene, sub=scene.alice if who == "alice" else scene.bob, headers=proof(token))

    assert {call: r.status_code for call, r in answers.items()} == dict.fromkeys(answers, status), case
    for call, response in answers.items():
        problem = response.json()
        assert response.headers["content-type"].startswith("application/problem+json"), call
        assert (problem["code"], problem.get("reason")) == (code, reason), call
        for provider_token in world.provider_tokens.values():
            assert provider_token not in response.text, call
        if token:
            assert token not in response.text, call
    assert await snapshot(world.app, users) == before
    assert len(world.idp.revocations()) == revocations  # nothing was revoked at the provider either


async def test_the_users_own_token_opens_exactly_their_connection(scene: Scene) -> None:
    world = scene.world
    for token in (world.user_token(scene.alice), world.user_token(scene.alice, format="opaque")):
        async with world.app.http(world.client.api_key, headers=proof(token)) as http:
            answer = await http.get(
                f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": scene.alice}
            )
            created = await http.post(
                "/v1/flows",
                json={
                    "subject": {"iss": world.iss, "sub": scene.alice},
                    "kind": "external",
                    "url": "http://127.0.0.1:9/step",
                },
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["access_token"] == world.provider_tokens[scene.alice]
        assert created.status_code in (200, 201), created.text


async def test_a_token_for_one_of_several_resources_or_with_a_resource_claim_is_accepted(scene: Scene) -> None:
    world = scene.world
    listed = world.user_token(scene.alice, audience=[OTHER_RESOURCE, RESOURCE])
    by_resource = str(
        world.idp.mint(scene.alice, audience=OTHER_RESOURCE, resource=RESOURCE, format="jwt")["access_token"]
    )
    for token in (listed, by_resource):
        async with world.app.http(world.client.api_key, headers=proof(token)) as http:
            answer = await http.get(
                f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": scene.alice}
            )
        assert answer.status_code == 200, answer.text


async def test_an_access_token_type_is_accepted_as_rfc_9068_spells_it(scene: Scene) -> None:
    """``at+jwt`` or ``application/at+jwt``, in any case: media types compare without case."""
    world = scene.world
    for typ in ("at+jwt", "application/at+jwt", "AT+JWT", "Application/At+Jwt"):
        token = world.user_token(scene.alice, typ=typ)
        async with world.app.http(world.client.api_key, headers=proof(token)) as http:
            answer = await http.get(
                f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": scene.alice}
            )
        assert answer.status_code == 200, (typ, answer.text)
    for typ in ("JWT", "at+jwt+x", "application/jwt", "token-introspection+jwt"):
        token = world.user_token(scene.alice, typ=typ)
        async with world.app.http(world.client.api_key, headers=proof(token)) as http:
            answer = await http.get(
                f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": scene.alice}
            )
        assert (answer.status_code, answer.json()["reason"]) == (403, "token_type"), typ


async def test_a_client_without_subject_proof_is_not_asked_and_its_header_is_ignored(scene: Scene) -> None:
    world = scene.world
    legacy = await new_server_client(world.app, subject_proof="none")
    async with world.app.http(legacy.api_key, headers={SUBJECT_TOKEN_HEADER: "not-a-token"}) as http:
        created = await http.post(
            "/v1/flows",
            json={
                "subject": {"iss": world.iss, "sub": scene.mallory},
                "kind": "external",
                "url": "http://127.0.0.1:9/s",
            },
        )
    assert created.status_code == 201, created.text


async def test_a_client_that_must_prove_but_registered_no_resource_accepts_no_token(scene: Scene) -> None:
    world = scene.world
    bare = await new_server_client(world.app, subject_proof="required")
    async with world.app.http(bare.api_key, headers=proof(world.user_token(scene.alice))) as http:
        answer = await http.get(
            f"/v1/connections/{world.provider}/token", params={"iss": world.iss, "sub": scene.alice}
        )
    assert (answer.status_code, answer.json()["reason"]) == (403, "audience")


async def test_a_verified_token_is_remembered_until_its_expiry_or_a_minute(scene: Scene) -> None:
    """Three calls with one opaque token cost one introspection; the answer is asked again after
    60 s, and a token whose ``exp`` passes is refused from then on even though the issuer, on its
    own clock, still calls it active."""
    world = scene.world
    clock = ManualClock()
    prover = SubjectProver(
        world.app.state.issuers, world.app.state.read_sessions, http=world.app.state.http, clock=clock
    )
    client = await world.app.state.authenticator.authenticate(f"Bearer {world.client.api_key}")

    def introspections() -> int:
        return world.idp.stats().introspection_calls

    lasting = world.user_token(scene.alice, format="opaque")
    start = introspections()
    for _ in range(3):
        await prover.prove(client, iss=world.iss, sub=scene.alice, token=lasting)
    assert introspections() == start + 1
    clock.advance(59)
    await prover.prove(client, iss=world.iss, sub=scene.alice, token=lasting)
    assert introspections() == start + 1
    clock.advance(2)
    await prover.prove(client, iss=world.iss, sub=scene.alice, token=lasting)
    assert introspections() == start + 2

    # A fresh clock, at the issuer's time again.
    clock = ManualClock()
    prover = SubjectProver(
        world.app.state.issuers, world.app.state.read_sessions, http=world.app.state.http, clock=clock
    )
    short = world.user_token(scene.alice, format="opaque", ttl=20)
    await prover.prove(client, iss=world.iss, sub=scene.alice, token=short)
    calls = introspections()
    clock.advance(19)
    await prover.prove(client, iss=world.iss, sub=scene.alice, token=short)
    assert introspections() == calls
    clock.advance(2 + LEEWAY_SECONDS)  # past exp and the leeway
    with pytest.raises(SubjectTokenInvalid) as refused:
        await prover.prove(client, iss=world.iss, sub=scene.alice, token=short)
    assert refused.value.extra["reason"] == "expired"
    assert introspections() == calls + 1


async def test_the_cache_never_serves_one_clients_result_to_another_audience(scene: Scene) -> None:
    """The cached facts are the token's; each client's resource URIs are checked on every call."""
    world = scene.world
    other = await new_server_client(world.app, subject_proof="required", resource_uris=[OTHER_RESOURCE])
    token = world.user_token(scene.alice)
    query = {"iss": world.iss, "sub": scene.alice}
    async with world.app.http(world.client.api_key, headers=proof(token)) as http:
        first = await http.get(f"/v1/connections/{world.provider}/token", params=query)
    async with world.app.http(other.api_key, headers=proof(token)) as http:
        second = await http.get(f"/v1/connections/{world.provider}/token", params=query)
    assert first.status_code == 200
    assert (second.status_code, second.json()["reason"]) == (403, "audience")


async def test_a_second_untrusted_issuer_process_is_a_distinct_key(
    scene: Scene, oauth_server_factory: OAuthServerFactory
) -> None:
    """A token signed by a freshly started look-alike server (same software, same claims) fails."""
    look_alike = oauth_server_factory()
    token = scene.world.user_token(scene.alice, server=look_alike, iss=scene.world.iss)
    answers = await every_call(scene, sub=scene.alice, headers=proof(token))
    assert {r.json()["reason"] for r in answers.values()} == {"signature"}
