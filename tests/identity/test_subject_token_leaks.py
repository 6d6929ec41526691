"""A user's MCP access token, forwarded as the subject proof, goes to the user's issuer and nowhere
else: never into a log line, an error body, an admin answer, an event or any stored row.

The subject tokens are markers: an opaque token planted at the issuer (so its exact value is known
and greppable) and a JWT. They are sent on every call that names a subject and to the token
exchange, accepted and refused (another user, another audience, a revoked token); the issuer's
introspection secret is a marker as well. Then every log line, every answer, and every row of every
table is searched for them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
from playwright.async_api import Browser
from sqlalchemy import text

from service.admin.tokens import Role, create_token, parse_lifetime
from service.settings import Settings
from tests.support.apps import LogCapture, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.subjects import INTROSPECTION_SECRET, OTHER_RESOURCE, RESOURCE, World, build_world, connect, proof

pytestmark = pytest.mark.browser

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture(scope="module")
def idp() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def world(
    make_settings: Callable[..., Settings], idp: OAuthServer, chromium_browser: Browser
) -> AsyncIterator[tuple[World, str]]:
    async with running_app(make_settings()) as app:
        built = await build_world(app, idp)
        alice = f"alice-{uuid.uuid4().hex[:8]}"
        await connect(built, chromium_browser, alice)
        yield built, alice


async def test_subject_tokens_appear_nowhere(world: tuple[World, str]) -> None:
    scene, alice = world
    app, idp = scene.app, scene.idp
    marker = uuid.uuid4().hex[:12]
    opaque = f"SUBJTOK{marker}"
    idp.plant(access_token=opaque)
    assert scene.user_token(alice, format="opaque") == opaque
    jwt = scene.user_token(alice)
    strangers = {
        "revoked": scene.user_token(alice, format="opaque"),
        "other audience": scene.user_token(alice, audience=OTHER_RESOURCE),
        "other user": scene.user_token(f"mallory-{marker}"),
    }
    idp.revoke_grant(strangers["revoked"])
    secrets = {"opaque subject token": opaque, "JWT subject token": jwt, "introspection secret": INTROSPECTION_SECRET}
    secrets.update({f"{name} subject token": token for name, token in strangers.items()})

    capture = LogCapture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    answers: list[tuple[str, httpx.Response]] = []
    subject = {"iss": scene.iss, "sub": alice}
    query = {"iss": scene.iss, "sub": alice}
    try:
        async with app.http(scene.client.api_key) as http:
            for name, token in [("opaque", opaque), ("jwt", jwt), *strangers.items()]:
                headers = proof(token)
                created = await http.post(
                    "/v1/flows",
                    json={"subject": subject, "kind": "external", "url": f"http://127.0.0.1:9/{name}"},
                    headers=headers,
                )
                answers.append((f"create ({name})", created))
                if created.status_code == 201:
                    resolved = await http.post(
                        "/v1/flows/resolve",
                        json={"subject": subject, "request_state": created.json()["mcp"]["requestState"]},
                        headers=headers,
                    )
                    answers.append((f"resolve ({name})", resolved))
                answers.append(
                    (
                        f"token ({name})",
                        await http.get(f"/v1/connections/{scene.provider}/token", params=query, headers=headers),
                    )
                )
                exchanged = await http.post(
                    "/oauth/token",
                    data={
                        "grant_type": TOKEN_EXCHANGE,
                        "subject_token": token,
                        "subject_token_type": ACCESS_TOKEN,
                        "audience": scene.provider,
                    },
                )
                answers.append((f"exchange ({name})", exchanged))
            answers.append(
                (
                    "revoke",
                    await http.delete(f"/v1/connections/{scene.provider}", params=query, headers=proof(jwt)),
                )
            )
        async with app.state.sessions() as session:
            created_token = await create_token(session, name="leaks", role=Role.ADMIN, lifetime=parse_lifetime("1h"))
            await session.commit()
        async with httpx.AsyncClient(
            base_url=app.url, headers={"Authorization": f"Bearer {created_token.secret}"}
        ) as http:
            for path in (
                f"/admin/v1/server-clients/{scene.client.public_id}",
                "/admin/v1/server-clients",
                "/admin/v1/issuers",
                "/admin/v1/flows",
                "/admin/v1/audit",
                "/readyz",
            ):
                answers.append((path, await http.get(path)))
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)

    statuses = {label: response.status_code for label, response in answers}
    assert statuses["token (opaque)"] == statuses["token (jwt)"] == 200
    assert statuses["exchange (opaque)"] == statuses["exchange (jwt)"] == 200
    assert {statuses[f"token ({name})"] for name in strangers} == {403}
    assert {statuses[f"exchange ({name})"] for name in strangers} == {400}
    assert statuses["revoke"] == 200
    assert statuses["/admin/v1/issuers"] == 200

    assert capture.lines, "the log capture saw nothing; the test would prove nothing"
    assert any("subject token refused" in line for line in capture.lines)
    for line in capture.lines:
        for name, value in secrets.items():
            assert value not in line, f"{name} in a log line: {line}"
    for label, response in answers:
        for name, value in secrets.items():
            assert value not in response.text, f"{name} in the {label} answer"
    async with app.state.sessions() as session:
        tables = (
            await session.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
                )
            )
        ).scalars()
        stored = [
            row
            for table in list(tables)
            for row in (await session.execute(text(f'SELECT row_to_json(t)::text FROM "{table}" t'))).scalars()
        ]
    assert len(stored) > 10
    for row in stored:
        for name, value in secrets.items():
            # bytea columns print as hex, so look for the hex form of the plaintext too.
            assert value not in row and value.encode().hex() not in row, f"{name} stored in clear: {row[:200]}"
    assert RESOURCE in " ".join(stored)  # the search covered server_clients
