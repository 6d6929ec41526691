"""The example server's paid tool: ``premium_report`` asks for a payment through elicitd; the
payer's side is Stripe Checkout played by the test double (the session paid, then Stripe's signed
``checkout.session.completed`` webhook), on both protocol revisions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from mcp_types import ElicitResult

from service.payments.plugin import PaymentKindServices
from service.settings import Settings
from tests.client.flaky_server import flaky_server
from tests.consent.helpers import kinds_app
from tests.mcp.harness import AUDIENCE, Mode, example_server, mcp_client, text_of
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import API_KEY, WEBHOOK_SECRET, StripeDouble


@pytest.fixture(scope="module")
def stripe_double() -> Iterator[StripeDouble]:
    with StripeDouble() as double:
        yield double


@pytest.fixture(scope="module")
async def pay_app(
    make_settings: Callable[..., Settings], oauth_server: OAuthServer, stripe_double: StripeDouble
) -> AsyncIterator[RunningApp]:
    async with kinds_app(
        make_settings,
        oauth_server,
        stripe_secret_key=API_KEY,
        stripe_webhook_secret=WEBHOOK_SECRET,
        stripe_api_base=stripe_double.url,
    ) as running:
        yield running


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_paid_tool_runs_after_the_payment(
    pay_app: RunningApp, oauth_server: OAuthServer, stripe_double: StripeDouble, mode: Mode
) -> None:
    client = await new_server_client(pay_app, display_name="Example Reports")
    token = oauth_server.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]
    tasks: list[asyncio.Task[None]] = []
    seen: list[str] = []

    async def pay(flow_ref: str) -> None:
        flow = await pay_app.state.flows.read(uuid.UUID(flow_ref[3:]))
        assert flow is not None
        await pay_app.state.kind("payment", PaymentKindServices).payments.checkout_url(flow)  # what the Pay button does
        paid = stripe_double.pay(stripe_double.session_for(flow_ref)["id"])
        delivered = await stripe_double.deliver(pay_app.url, stripe_double.event("checkout.session.completed", paid))
        assert delivered.status_code == 200, delivered.text

    async def callback(context: Any, params: Any) -> ElicitResult:
        flow_ref = params.url.rsplit("/", 1)[1]
        seen.append(flow_ref)
        tasks.append(asyncio.get_running_loop().create_task(pay(flow_ref)))
        return ElicitResult(action="accept")

    async with (
        example_server(pay_app.url, client.api_key, oauth_server.issuer) as server,
        mcp_client(server.url, token, mode=mode, elicitation_callback=callback) as mcp,
    ):
        result = await mcp.call_tool("premium_report", {"topic": "rates"})
        await asyncio.gather(*tasks)
    assert result.is_error is False, result.content
    payment_id = stripe_double.session_for(seen[0])["payment_intent"]
    assert text_of(result) == f"Premium report on rates (payment {payment_id}): everything is fine."


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_paid_tool_without_payments_says_why_at_once(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    # This elicitd has no payment provider: its 503 is permanent, so the tool hears it after one
    # request (no retries), as a tool error the model can read, with elicitd's code.
    token = oauth_server.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]
    asked: list[str] = []

    async def callback(context: Any, params: Any) -> ElicitResult:
        asked.append(params.url)
        return ElicitResult(action="accept")

    async with (
        flaky_server(elicitd.url) as counted,
        example_server(counted.url, server_client.api_key, oauth_server.issuer) as server,
        mcp_client(server.url, token, mode=mode, elicitation_callback=callback) as mcp,
    ):
        result = await mcp.call_tool("premium_report", {"topic": "rates"})
    assert result.is_error is True and asked == []
    assert text_of(result) == (
        "Error executing tool premium_report: Could not ask for the payment: Payments are not configured on "
        "this elicitd (ELICITD_STRIPE_SECRET_KEY) [payments_unavailable]."
    )
    assert counted.seen == [("POST", "/v1/flows")]
