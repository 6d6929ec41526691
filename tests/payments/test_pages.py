"""Payment pages in real Chromium: summary page → the (local) Stripe checkout → back to elicitd.

"Return first" and "webhook first" are the two orders a real payment can settle in; "both at once"
races them. Each must end in exactly one transition.
"""

from __future__ import annotations

import asyncio
import uuid

from playwright.async_api import Page

from tests.consent.helpers import event_types, flow_row, new_sub, open_as, transitions
from tests.payments.conftest import Payments
from tests.payments.test_webhooks import payment_row
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.browser import save_screenshot
from tests.support.oauth_server import OAuthServer
from tests.support.stripe_double import StripeDouble


async def go_to_checkout(page: Page, payments: Payments, sub: str, *, screenshot: str | None = None) -> str:
    created = await payments.create(sub)
    await open_as(page, created["flow"]["url"], sub, payments.issuer)
    assert await page.locator("#payment-amount").inner_text() == "€19.99"
    assert await page.locator("#payment-description").inner_text() == "Order 42"
    assert "Acme Shop Assistant" in await page.locator("main").inner_text()
    if screenshot:
        await save_screenshot(page, screenshot)
    async with page.expect_navigation():
        await page.click("#pay")
    assert page.url.startswith(payments.double.url + "/checkout/cs_test_")
    flow_ref: str = created["flow"]["id"]
    return flow_ref


async def test_return_first_completes_from_a_verified_lookup(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble, browser_page: Page
) -> None:
    sub = new_sub("ret")
    flow_id = await go_to_checkout(browser_page, payments, sub, screenshot="payment-page")
    await save_screenshot(browser_page, "payment-stripe-double-checkout")
    async with browser_page.expect_navigation(url=f"{app.url}/pay/{flow_id}/return"):
        await browser_page.click("#pay")
    assert await browser_page.locator("#outcome").inner_text() == "Payment received"
    assert "You can return to Acme Shop Assistant" in await browser_page.locator("main").inner_text()
    await save_screenshot(browser_page, "payment-received")

    session = stripe_double.session_for(flow_id)
    row = await flow_row(app, flow_id)
    assert row["status"] == "completed"
    assert row["result"]["payment_id"] == session["payment_intent"]
    assert await payment_row(app, flow_id) == {
        "status": "paid",
        "payment_id": session["payment_intent"],
        "settled_by": "return",
    }
    # The webhook arrives afterwards: acknowledged, nothing changes.
    late = await payments.webhook("checkout.session.completed", session)
    assert (late.status_code, late.json()["outcome"]) == (200, "already_settled")
    assert [(t["to_status"], t["detail"]["settled_by"]) for t in await transitions(app, flow_id)] == [
        ("completed", "return")
    ]
    assert "checkout_started" in await event_types(app, flow_id)


async def test_webhook_first_then_the_user_returns(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble, browser_page: Page
) -> None:
    sub = new_sub("hook")
    flow_id = await go_to_checkout(browser_page, payments, sub)
    session = stripe_double.pay(stripe_double.session_for(flow_id)["id"])
    hook = await payments.webhook("checkout.session.completed", session)
    assert hook.json()["outcome"] == "completed"
    retrieves = stripe_double.calls("retrieve")
    await browser_page.goto(f"{app.url}/pay/{flow_id}/return")
    assert await browser_page.locator("#outcome").inner_text() == "Payment received"
    assert stripe_double.calls("retrieve") == retrieves, "a settled payment needs no lookup"
    assert [(t["to_status"], t["detail"]["settled_by"]) for t in await transitions(app, flow_id)] == [
        ("completed", "webhook")
    ]


async def test_webhook_and_return_at_once_make_exactly_one_transition(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble, browser_page: Page
) -> None:
    sub = new_sub("race")
    for _ in range(3):
        flow_id = await go_to_checkout(browser_page, payments, sub)
        session = stripe_double.pay(stripe_double.session_for(flow_id)["id"])
        payload = stripe_double.event("checkout.session.completed", session)
        hook, page_response = await asyncio.gather(
            stripe_double.deliver(app.url, payload), browser_page.goto(f"{app.url}/pay/{flow_id}/return")
        )
        assert hook.status_code == 200
        assert hook.json()["outcome"] in {"completed", "already_settled"}
        assert page_response is not None and page_response.status == 200
        assert await browser_page.locator("#outcome").inner_text() == "Payment received"
        moved = await transitions(app, flow_id)
        assert len(moved) == 1 and moved[0]["to_status"] == "completed"
        assert (await payment_row(app, flow_id))["status"] == "paid"


async def test_decline_on_the_page_declines_and_closes_the_checkout(
    app: RunningApp, client: ServerClientHandle, payments: Payments, stripe_double: StripeDouble, browser_page: Page
) -> None:
    sub = new_sub("decl")
    flow_id = await go_to_checkout(browser_page, payments, sub)
    await browser_page.goto(payments.double.session_for(flow_id)["cancel_url"])  # "back" from Stripe
    assert await browser_page.locator("#payment-amount").inner_text() == "€19.99"
    async with browser_page.expect_navigation():
        await browser_page.click("#decline")
    assert await browser_page.locator("h1").inner_text() == "Declined"
    row = await flow_row(app, flow_id)
    assert (row["status"], row["error_code"]) == ("declined", "declined")
    assert stripe_double.session_for(flow_id)["status"] == "expired"
    assert (await payment_row(app, flow_id))["status"] == "expired"


async def test_every_payment_page_refuses_another_account(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble, issuer: OAuthServer, browser_page: Page
) -> None:
    owner, intruder = new_sub("own"), new_sub("mallory")
    created = await payments.create(owner)
    flow_id = created["flow"]["id"]
    creates = stripe_double.calls("create")
    await open_as(browser_page, created["flow"]["url"], intruder, issuer)
    assert "another account" in (await browser_page.locator("main").inner_text()).lower()
    assert await browser_page.locator("#payment-amount").count() == 0
    await save_screenshot(browser_page, "payment-refused-other-account")
    token = await browser_page.locator("input[name=csrf_token]").first.get_attribute("value")
    checkout = await browser_page.request.post(
        f"{app.url}/pay/{flow_id}/checkout", form={"csrf_token": token or ""}, max_redirects=0
    )
    decline = await browser_page.request.post(
        f"{app.url}/pay/{flow_id}/decline", form={"csrf_token": token or ""}, max_redirects=0
    )
    back = await browser_page.request.get(f"{app.url}/pay/{flow_id}/return", max_redirects=0)
    assert (checkout.status, decline.status, back.status) == (403, 403, 403)
    assert stripe_double.calls("create") == creates, "no checkout may be created for someone else's flow"
    assert (await flow_row(app, flow_id))["status"] == "pending"
    assert await transitions(app, flow_id) == []
    assert (await event_types(app, flow_id)).count("subject_mismatch") >= 4


async def test_the_pay_form_needs_the_csrf_token(
    app: RunningApp, payments: Payments, stripe_double: StripeDouble, browser_page: Page
) -> None:
    sub = new_sub("csrf")
    created = await payments.create(sub)
    await open_as(browser_page, created["flow"]["url"], sub, payments.issuer)
    creates = stripe_double.calls("create")
    response = await browser_page.request.post(
        f"{app.url}/pay/{created['flow']['id']}/checkout", form={"csrf_token": "B" * 43}, max_redirects=0
    )
    assert response.status == 403
    assert stripe_double.calls("create") == creates
    assert uuid.UUID(created["flow"]["id"][3:])
