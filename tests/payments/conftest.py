from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from service.flows.models import Flow
from service.payments.plugin import PaymentKindServices
from service.settings import Settings
from tests.consent.helpers import create_flow, kinds_app, new_sub
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.browser import (  # noqa: F401 (fixtures and hook are found by name)
    browser_context,
    browser_page,
    chromium_browser,
    pytest_runtest_makereport,
)
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import API_KEY, WEBHOOK_SECRET, StripeDouble


@pytest.fixture(scope="module")
def issuer() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def stripe_double() -> Iterator[StripeDouble]:
    with StripeDouble() as double:
        yield double


@pytest.fixture(scope="module")
async def app(
    make_settings: Callable[..., Settings], issuer: OAuthServer, stripe_double: StripeDouble
) -> AsyncIterator[RunningApp]:
    async with kinds_app(
        make_settings,
        issuer,
        stripe_secret_key=API_KEY,
        stripe_webhook_secret=WEBHOOK_SECRET,
        stripe_api_base=stripe_double.url,
    ) as running:
        yield running


@pytest.fixture
async def client(app: RunningApp) -> ServerClientHandle:
    return await new_server_client(app, display_name="Acme Shop Assistant")


class Payments:
    """Creates payment flows through the API and opens their checkout the way the Pay button does."""

    def __init__(self, app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, double: StripeDouble) -> None:
        self.app, self.client, self.issuer, self.double = app, client, issuer, double

    def body(self, sub: str, **params: Any) -> dict[str, Any]:
        values: dict[str, Any] = {"amount": 1999, "currency": "eur", "description": "Order 42"}
        values.update(params)
        return {"subject": {"iss": self.issuer.issuer, "sub": sub}, "kind": "payment", "params": values}

    async def create(self, sub: str | None = None, **params: Any) -> dict[str, Any]:
        return await create_flow(self.app, self.client, self.body(sub or new_sub("payer"), **params))

    async def flow(self, flow_ref: str) -> Flow:
        found: Flow | None = await self.app.state.flows.read(uuid.UUID(flow_ref[3:]))
        assert found is not None
        return found

    async def checkout(self, flow_ref: str) -> dict[str, Any]:
        url = await self.app.state.kind("payment", PaymentKindServices).payments.checkout_url(await self.flow(flow_ref))
        session = self.double.session_for(flow_ref)
        assert url == session["url"]
        return session

    async def webhook(self, event_type: str, session: dict[str, Any], **kwargs: Any) -> Any:
        payload = self.double.event(event_type, session)
        return await self.double.deliver(self.app.url, payload, **kwargs)


@pytest.fixture
def payments(app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, stripe_double: StripeDouble) -> Payments:
    return Payments(app, client, issuer, stripe_double)
