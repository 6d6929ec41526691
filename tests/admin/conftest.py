"""Admin fixtures: tokens per role (plus expired and revoked ones) on the shared instance, and
helpers that make flows, clients and webhook deliveries through the real API."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from service.admin.tokens import ADMIN_TOKEN_ID, Role, create_token, parse_lifetime
from service.payments.plugin import PaymentKindServices
from service.settings import Settings
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.factories import plant_connection, store_connection, token_set
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer, register_provider
from tests.support.stripe_double import API_KEY, WEBHOOK_SECRET, StripeDouble
from tests.support.waiting import until

# A closed loopback port: deliveries to it fail fast and never leave the machine.
DEAD_HOOK = "http://127.0.0.1:9/hook"


PROVIDER_CLIENT = "elicitd-admin-provider"
PROVIDER_SECRET = "provider-secret-admin-tests"


@pytest.fixture(scope="session")
def oauth() -> Iterator[OAuthServer]:
    """The admin tests' OAuth server: issuer and third-party provider at once."""
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="session")
def stripe_double() -> Iterator[StripeDouble]:
    with StripeDouble() as double:
        yield double


@pytest.fixture(scope="session")
async def elicitd(
    make_settings: Callable[..., Settings], stripe_double: StripeDouble, oauth: OAuthServer
) -> AsyncIterator[RunningApp]:
    """The admin tests' instance: default settings plus payments against the local Stripe double, and
    the OAuth server registered as a trusted issuer (payment flows need a known subject issuer)."""
    settings = make_settings(
        stripe_secret_key=API_KEY, stripe_webhook_secret=WEBHOOK_SECRET, stripe_api_base=stripe_double.url
    )
    async with running_app(settings) as app:
        await register_issuer(app, oauth)
        yield app


@pytest.fixture(scope="module", autouse=True)
async def _close_opened_payments(elicitd: RunningApp, stripe_double: StripeDouble) -> AsyncIterator[None]:
    """The database is shared by the whole pytest session and other modules reconcile every
    unsettled checkout, which would ask *their* Stripe double about ours: so each admin module
    closes the checkouts it opened at this double (expired there, then reconciled for real)."""
    yield
    async with elicitd.state.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT flow_id, session_id FROM payments WHERE status IN "
                    "('open', 'processing') AND session_id IS NOT NULL"
                )
            )
        ).all()
    for flow_id, session_id in rows:
        try:
            found = stripe_double.session(session_id)
        except KeyError:
            continue  # another module's double
        if found["status"] == "open":
            stripe_double.expire(session_id)
        await elicitd.state.kind("payment", PaymentKindServices).payments.reconcile_one(flow_id)


async def make_provider(
    app: RunningApp, server: OAuthServer, name: str | None = None, *, secret: str = PROVIDER_SECRET
) -> str:
    """A provider row pointing at the OAuth server, made by the domain's own upsert."""
    name = name or f"p-{uuid.uuid4().hex[:10]}"
    await register_provider(app, server, name, client_id=PROVIDER_CLIENT, secret=secret, callback=False)
    return name


async def make_connection(
    app: RunningApp,
    server: OAuthServer,
    provider: str,
    *,
    access_token: str | None = None,
    refresh_token: str | None = None,
    with_refresh: bool = True,
) -> str:
    """A connection of a new subject (``tests/support/factories.py``). Without explicit tokens they
    are minted by the OAuth server for the provider's client, so refresh and revocation work
    against it for real."""
    sub = f"u{uuid.uuid4().hex[:10]}"
    if access_token is None:
        connection, _ = await plant_connection(
            app,
            server,
            provider,
            iss=server.issuer,
            sub=sub,
            login=sub,
            client_id=PROVIDER_CLIENT,
            with_refresh=with_refresh,
        )
        return connection
    tokens = token_set(access_token, refresh_token if with_refresh else None)
    return await store_connection(
        app,
        provider,
        tokens,
        iss=server.issuer,
        sub=sub,
        account_id=server.account_id(sub),
        account_login=sub,
        requested=["files:read"],
    )


async def make_payment(app: RunningApp, server: OAuthServer) -> str:
    """A payment flow (API) with its checkout opened at the Stripe double, as the Pay button does."""
    client = await new_server_client(app)
    body = {
        "subject": {"iss": server.issuer, "sub": f"payer-{uuid.uuid4().hex[:8]}"},
        "kind": "payment",
        "params": {"amount": 1999, "currency": "eur", "description": "Order 42"},
    }
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 201, response.text
    flow_ref = str(response.json()["flow"]["id"])
    flow = await app.state.flows.read(uuid.UUID(flow_ref[3:]))
    assert flow is not None
    assert await app.state.kind("payment", PaymentKindServices).payments.checkout_url(flow)
    return flow_ref


@dataclass
class Token:
    id: str
    secret: str
    role: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


async def make_token(app: RunningApp, role: str, *, expired: bool = False, revoked: bool = False) -> Token:
    async with app.state.sessions() as session:
        created = await create_token(session, name=f"test-{role}", role=Role.parse(role), lifetime=parse_lifetime("1h"))
        if expired:
            await session.execute(
                text("UPDATE admin_tokens SET expires_at = now() - interval '1 second' WHERE id = :id"),
                {"id": created.token.id},
            )
        if revoked:
            await session.execute(
                text("UPDATE admin_tokens SET revoked_at = now() WHERE id = :id"), {"id": created.token.id}
            )
        await session.commit()
    return Token(id=ADMIN_TOKEN_ID.format(created.token.id), secret=created.secret, role=role)


@pytest.fixture(scope="session")
async def tokens(elicitd: RunningApp) -> dict[str, Token]:
    return {
        "viewer": await make_token(elicitd, "viewer"),
        "operator": await make_token(elicitd, "operator"),
        "admin": await make_token(elicitd, "admin"),
        "expired": await make_token(elicitd, "admin", expired=True),
        "revoked": await make_token(elicitd, "admin", revoked=True),
    }


def admin_http(app: RunningApp, token: Token | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=app.url, headers=token.headers if token else {}, timeout=60)


def subject_body(sub: str | None = None, iss: str = "https://id.example.com") -> dict[str, Any]:
    return {"iss": iss, "sub": sub or f"user-{uuid.uuid4().hex[:10]}"}


async def create_flow(
    app: RunningApp,
    client: ServerClientHandle,
    *,
    sub: str | None = None,
    iss: str = "https://id.example.com",
    tag: str | None = None,
) -> str:
    """A pending ``external`` flow; ``tag`` makes it distinct from the subject's other flows."""
    body = {
        "subject": subject_body(sub, iss),
        "kind": "external",
        "url": f"https://app.example.com/step/{tag or uuid.uuid4().hex[:8]}",
    }
    async with app.http(client.api_key) as http:
        response = await http.post("/v1/flows", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["flow"]["id"])


async def complete_flow(
    app: RunningApp, client: ServerClientHandle, flow_id: str, result: dict[str, Any] | None = None
) -> httpx.Response:
    async with app.http(client.api_key) as http:
        return await http.post(f"/v1/flows/{flow_id}/complete", json={"result": result or {"ok": True}})


async def hooked_client(app: RunningApp, url: str = DEAD_HOOK) -> tuple[ServerClientHandle, str]:
    """A server client with a webhook (returns the signing secret, shown once) that answered its
    verification challenge once and has gone quiet since (``DEAD_HOOK``): events are queued for it
    and stay undelivered, for the tests of backlogs, replays and delivery listings."""
    client = await new_server_client(app)
    admin = await make_token(app, "admin")
    async with admin_http(app, admin) as http:
        response = await http.put(f"/admin/v1/server-clients/{client.public_id}/webhook", json={"url": url})
    assert response.status_code == 200, response.text
    await answered_challenge(app, client.id)
    return client, str(response.json()["webhook_secret"])


async def legacy_state(app: RunningApp, client_id: uuid.UUID) -> str | None:
    """The state of the endpoint ``PUT …/webhook`` writes (the client's legacy endpoint)."""
    async with app.state.sessions() as session:
        found = await session.execute(
            text("SELECT state FROM webhook_endpoints WHERE server_client_id = :c AND legacy"), {"c": client_id}
        )
        return found.scalar()


async def until_verified(app: RunningApp, client_id: uuid.UUID) -> None:
    """Once the receiver at the client's webhook has answered its verification challenge (a first
    attempt that found nothing listening is asked again after the backoff: 10 s by default)."""

    async def verified() -> bool:
        return await legacy_state(app, client_id) == "active"

    await until(verified, timeout=30, what="the webhook verified")


async def answered_challenge(app: RunningApp, client_id: uuid.UUID) -> None:
    """The client's legacy endpoint (what ``PUT …/webhook`` writes) as it is once its URL has
    answered the verification challenge: ``active``, verified now."""
    async with app.state.sessions() as session:
        verified = await session.execute(
            text(
                "UPDATE webhook_endpoints SET state = 'active', verified_at = now() "
                "WHERE server_client_id = :c AND legacy AND state = 'pending_verification'"
            ),
            {"c": client_id},
        )
        await session.commit()
    assert verified.rowcount == 1  # type: ignore[attr-defined]
