"""A disabled server client's webhook deliveries are held: never sent while it is disabled,
delivered when it is enabled again within the retry window, abandoned without a POST after it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from service.flows.repository import Transition
from service.flows.states import Actor, FlowStatus
from service.settings import Settings
from tests.admin.conftest import admin_http, create_flow, make_token
from tests.signals.receiver import receiving
from tests.signals.test_webhooks import delivered_row, delivery_round, fast, outbox, with_webhook
from tests.support.apps import RunningApp, ServerClientHandle, running_app
from tests.support.waiting import until


async def set_disabled(app: RunningApp, client: ServerClientHandle, disabled: bool) -> None:
    action = "disable" if disabled else "enable"
    async with admin_http(app, await make_token(app, "admin")) as http:
        response = await http.post(f"/admin/v1/server-clients/{client.public_id}/{action}")
    assert response.status_code == 200, response.text
    assert response.json()["disabled"] is disabled


async def finish(app: RunningApp, flow_id: str) -> None:
    """Complete a flow from inside (a disabled client's key no longer authenticates, but a page
    answered or a sweep can still end the flows it had pending)."""
    moved = await app.state.flows.finish(
        uuid.UUID(flow_id[3:]), Transition(FlowStatus.COMPLETED, Actor.API, result={"ok": True})
    )
    assert moved is not None and moved.status == "completed"


async def test_held_while_disabled_then_delivered_when_enabled(make_settings: Callable[..., Settings]) -> None:
    async with receiving() as receiver, running_app(fast(make_settings)) as app:
        client, _ = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        await set_disabled(app, client, True)
        await finish(app, flow_id)
        # Due now, and a whole round run here claims nothing: the background rounds skip it alike.
        assert await delivery_round(app) == 0
        row = await outbox(app, flow_id)
        assert (row.attempts, row.delivered_at, row.abandoned_at) == (0, None, None)
        assert receiver.received == []
        await set_disabled(app, client, False)
        delivered = await delivered_row(app, flow_id)
    assert len(receiver.received) == 1
    assert (delivered.attempts, delivered.last_status) == (1, 200)


async def test_abandoned_without_a_post_once_the_window_ran_out_while_disabled(
    make_settings: Callable[..., Settings],
) -> None:
    async with (
        receiving() as receiver,
        running_app(fast(make_settings, WEBHOOK_GIVE_UP_SECONDS="1")) as app,
    ):
        client, _ = await with_webhook(app, receiver.url)
        flow_id = await create_flow(app, client)
        await set_disabled(app, client, True)
        await finish(app, flow_id)

        async def abandoned() -> Any:
            return (await outbox(app, flow_id)).abandoned_at is not None

        await until(abandoned, timeout=30, what="the held delivery abandoned")
        row = await outbox(app, flow_id)
        assert (row.attempts, row.last_status, row.last_error) == (1, None, "server client disabled")
        await set_disabled(app, client, False)
        # Enabled again, it stays abandoned (a replay would queue it anew).
        assert await delivery_round(app) == 0
        async with app.state.sessions() as session:
            pending = await session.execute(
                text("SELECT count(*) FROM webhook_outbox WHERE flow_id = :f AND abandoned_at IS NULL"),
                {"f": uuid.UUID(flow_id[3:])},
            )
            assert pending.scalar_one() == 0
    assert receiver.received == []
