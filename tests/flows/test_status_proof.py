"""``GET /v1/flows/{id}`` of a server client that must prove the subject: its API key alone reads
the flow's id, state and outcome; the flow's user's own token reads the rest (subject, page,
result); another user's token is refused as on every call naming a subject.

A real identity provider mints the users' tokens; every read goes to an instance with the hot
routes and to one without them (the same database), which must answer alike.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from service.settings import Settings
from tests.support.apps import RunningApp, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.subjects import World, build_world, proof

RESULT = {"account_id": "acct-7f3a", "fields": ["api_key"]}


@pytest.fixture(scope="module")
def idp() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def apps(make_settings: Callable[..., Settings]) -> AsyncIterator[tuple[RunningApp, RunningApp]]:
    async with running_app(make_settings()) as hot, running_app(make_settings(hot_routes=False)) as plain:
        yield hot, plain


async def read(apps: tuple[RunningApp, RunningApp], api_key: str, path: str, **headers: str) -> httpx.Response:
    """The read on both instances: the same status and body; the hot one's answer."""
    answers = []
    for app in apps:
        async with app.http(api_key) as http:
            answers.append(await http.get(path, headers=headers))
    hot, plain = answers
    assert (hot.status_code, hot.json()) == (plain.status_code, plain.json())
    return hot


def summary_of(whole: dict[str, Any]) -> dict[str, Any]:
    """What the key alone is told: the flow without its subject and page, and no result."""
    return {"flow": {name: value for name, value in whole["flow"].items() if name not in ("subject", "url")}}


async def external_flow(world: World, sub: str) -> str:
    body = {"subject": {"iss": world.iss, "sub": sub}, "kind": "external", "url": "https://app.example.com/step"}
    async with world.app.http(world.client.api_key) as http:
        created = await http.post("/v1/flows", json=body, headers=proof(world.user_token(sub)))
    assert created.status_code == 201, created.text
    return str(created.json()["flow"]["id"])


async def test_the_key_alone_reads_the_state_and_the_users_token_the_rest(
    apps: tuple[RunningApp, RunningApp], idp: OAuthServer
) -> None:
    world = await build_world(apps[0], idp)
    key = world.client.api_key
    alice, bob = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "bob"))
    flow = await external_flow(world, alice)
    path = f"/v1/flows/{flow}"

    pending_alone = await read(apps, key, path)
    parked_alone = await read(apps, key, f"{path}?wait_seconds=0.2")  # parks, then answers the summary
    pending_whole = await read(apps, key, f"{path}?wait_seconds=0.2", **proof(world.user_token(alice)))
    async with world.app.http(key) as http:
        completed = await http.post(f"{path}/complete", json={"result": RESULT})
    alone = await read(apps, key, path)
    whole = await read(apps, key, path, **proof(world.user_token(alice)))
    waited_whole = await read(apps, key, f"{path}?wait_seconds=5", **proof(world.user_token(alice)))
    other = await read(apps, key, path, **proof(world.user_token(bob)))
    # An opaque token the issuer never issued: introspected, and inactive.
    unknown = await read(apps, key, f"{path}?wait_seconds=5", **proof("not-a-token"))

    assert pending_whole.status_code == 200
    assert pending_whole.json()["flow"]["subject"] == {"iss": world.iss, "sub": alice}
    assert pending_whole.json()["flow"]["url"] == "https://app.example.com/step"
    assert (pending_alone.status_code, pending_alone.json()) == (200, summary_of(pending_whole.json()))
    assert (parked_alone.status_code, parked_alone.json()) == (200, summary_of(pending_whole.json()))
    assert pending_alone.json()["flow"]["status"] == "pending"

    assert whole.status_code == 200
    assert whole.json()["result"] == RESULT
    assert whole.json()["flow"]["subject"] == {"iss": world.iss, "sub": alice}
    assert waited_whole.json() == whole.json()
    assert (alone.status_code, alone.json()) == (200, summary_of(whole.json()))
    assert sorted(alone.json()["flow"]) == ["completed_at", "created_at", "expires_at", "id", "kind", "status"]
    assert alone.json()["flow"]["status"] == "completed"
    # Completing needs no subject token: its answer is the summary too.
    assert (completed.status_code, completed.json()) == (200, alone.json())

    assert other.status_code == 403
    assert (other.json()["code"], other.json()["reason"]) == ("subject_token_invalid", "other_subject")
    assert unknown.status_code == 403
    assert (unknown.json()["code"], unknown.json()["reason"]) == ("subject_token_invalid", "inactive")

    # A client that need not prove the subject reads every status whole, as before; the header is ignored.
    client = await new_server_client(apps[0])
    body = {"subject": {"iss": world.iss, "sub": alice}, "kind": "external", "url": "https://app.example.com/loose"}
    async with apps[0].http(client.api_key) as http:
        loose = (await http.post("/v1/flows", json=body)).json()["flow"]["id"]
        loose_completed = await http.post(f"/v1/flows/{loose}/complete", json={"result": RESULT})
    loose_read = await read(apps, client.api_key, f"/v1/flows/{loose}", **proof("ignored-for-this-client"))
    assert loose_completed.json() == loose_read.json()
    assert loose_read.json()["result"] == RESULT
    assert loose_read.json()["flow"]["subject"] == {"iss": world.iss, "sub": alice}
    assert loose_read.json()["flow"]["url"] == "https://app.example.com/loose"
