"""A sign-in whose issuer fails: unreachable, hanging, resetting, failing TLS, or answering garbage.

Each ends in a page that says the sign-in service could not be used — never a 500, never a stack —
and leaves the flow pending and no session behind. The issuer is a ``HostileServer``; the outbound
timeout is one second, so a hanging issuer costs the test about that long.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
from sqlalchemy import text

from service.db.base import FLOW_ID
from service.identity import sessions as store
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.settings import Settings
from tests.identity.conftest import make_flow, new_sub
from tests.support.apps import RunningApp, new_server_client, running_app
from tests.support.hostile import FAILURES, Answer, Behavior, HostileServer, closed_port, hostile

TIMEOUT = 1.0
ROUTES: dict[str, Behavior] = {
    **FAILURES,
    "/array": Answer.json([1, 2, 3]),
    "/no-id-token": Answer.json({"access_token": "a", "token_type": "Bearer"}),
    "/bad-id-token": Answer.json({"access_token": "a", "token_type": "Bearer", "id_token": "not.a.jwt"}),
}


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile(ROUTES) as found:
        yield found


@pytest.fixture(scope="module")
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings(outbound_timeout_seconds=TIMEOUT)) as found:
        yield found


def token_endpoints(server: HostileServer) -> dict[str, str]:
    return {
        "unreachable": f"http://127.0.0.1:{closed_port()}/token",
        "hangs": server.url + "/hang",
        "resets": server.url + "/reset",
        "tls_fails": server.tls_url + "/token",
        "html": server.url + "/garbage",
        "broken_json": server.url + "/notjson",
        "deep_json": server.url + "/deep",
        "http_503": server.url + "/down",
        "not_an_object": server.url + "/array",
        "no_id_token": server.url + "/no-id-token",
        "bad_id_token": server.url + "/bad-id-token",
    }


async def sign_in_via(
    app: RunningApp, server: HostileServer, token_endpoint: str, *, jwks: str = "/garbage"
) -> httpx.Response:
    """Register an issuer with these endpoints, open a flow page, and come back to the callback as
    the issuer would (with a code); the callback then calls the token endpoint."""
    issuer = f"{server.url}/idp-{uuid.uuid4().hex[:8]}"
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(
                issuer=issuer,
                client_id="elicitd",
                authorization_endpoint=server.url + "/authorize",
                token_endpoint=token_endpoint,
                jwks_uri=server.url + jwks,
            ),
        )
        await session.commit()
    client = await new_server_client(app)
    flow = await make_flow(app, client, iss=issuer, sub=new_sub("alice"))
    async with app.http() as browser:
        start = await browser.get(f"/f/{FLOW_ID.format(flow.id)}")
        assert start.status_code == 303
        state = httpx.URL(start.headers["location"]).params["state"]
        answer = await browser.get("/auth/callback", params={"code": "c0de", "state": state, "iss": issuer})
        assert store.LOGIN_COOKIE in browser.cookies
    async with app.state.sessions() as session:
        sessions = (
            await session.execute(text("SELECT count(*) FROM browser_sessions WHERE iss = :i"), {"i": issuer})
        ).scalar_one()
        status = (await session.execute(text("SELECT status FROM flows WHERE id = :f"), {"f": flow.id})).scalar_one()
    assert sessions == 0
    assert status == "pending"
    return answer


@pytest.mark.parametrize(
    "failure",
    [
        "unreachable",
        "hangs",
        "resets",
        "tls_fails",
        "html",
        "broken_json",
        "deep_json",
        "http_503",
        "not_an_object",
        "no_id_token",
        "bad_id_token",
    ],
)
async def test_a_failing_token_endpoint_gives_a_page(app: RunningApp, server: HostileServer, failure: str) -> None:
    response = await sign_in_via(app, server, token_endpoints(server)[failure])
    assert response.status_code in (400, 502), response.text[:300]
    assert "text/html" in response.headers["content-type"]
    assert response.headers["cache-control"] == "no-store"
    assert "Traceback" not in response.text
    assert "Something went wrong on our side" not in response.text


@pytest.mark.parametrize("jwks", ["/hang", "/reset", "/garbage", "/deep", "/down"])
async def test_failing_keys_give_a_page(app: RunningApp, server: HostileServer, jwks: str) -> None:
    """A token endpoint that answers, but keys that cannot be had: the ID token cannot be checked."""
    import base64
    import json

    header = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": "k1"}).encode()).rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"x"}').rstrip(b"=").decode()
    id_token = f"{header}.{body}.c2ln"
    with hostile(
        {"/token": Answer.json({"access_token": "a", "token_type": "Bearer", "id_token": id_token})}
    ) as tokens:
        response = await sign_in_via(app, server, tokens.url + "/token", jwks=jwks)
    assert response.status_code in (400, 502), response.text[:300]
    assert "text/html" in response.headers["content-type"]
    assert "Something went wrong on our side" not in response.text


@pytest.mark.parametrize("behavior", FAILURES.values())
async def test_failing_discovery_gives_a_page(app: RunningApp, behavior: Behavior) -> None:
    """An issuer registered by URL alone: its metadata is fetched when a flow page needs it."""
    with hostile(default=behavior) as idp:
        issuer = f"{idp.url}/idp"
        async with app.state.sessions() as session:
            await upsert_issuer(session, app.state.vault, IssuerConfig(issuer=issuer, client_id="elicitd"))
            await session.commit()
        client = await new_server_client(app)
        flow = await make_flow(app, client, iss=issuer, sub=new_sub("bob"))
        async with app.http() as browser:
            response = await browser.get(f"/f/{FLOW_ID.format(flow.id)}")
    assert response.status_code == 502, response.text[:300]
    assert "text/html" in response.headers["content-type"]
    assert "Something went wrong on our side" not in response.text
