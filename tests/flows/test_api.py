"""The MCP-server API against a real elicitd on real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import text

from service.flows.schemas import Subject
from service.settings import Settings
from tests.flows.helpers import (
    create_external,
    db_events,
    db_flow,
    external_body,
    force_expiry,
    resolve_body,
    subject_json,
)
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.clock import ManualClock
from tests.support.waiting import parked, until


async def test_create_returns_ready_mcp_and_legacy_objects(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        response = await http.post("/v1/flows", json=external_body(subject, message="Finish the setup."))
    assert response.status_code == 201
    body = response.json()
    flow_id = body["flow"]["id"]
    assert flow_id.startswith("fl_") and len(flow_id) == 35
    assert body["status"] == "pending"
    assert body["flow"]["subject"] == subject_json(subject)
    key = f"elicitd_{flow_id}"
    assert body["mcp"]["resultType"] == "input_required"
    assert body["mcp"]["inputRequests"] == {
        key: {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Finish the setup.", "url": "https://app.example.com/step"},
        }
    }
    assert body["mcp"]["requestState"].startswith("v2.test2.")
    legacy = body["legacy"]
    assert legacy["code"] == -32042
    assert legacy["elicitation"] == {
        "mode": "url",
        "elicitationId": flow_id,
        "message": "Finish the setup.",
        "url": "https://app.example.com/step",
    }
    assert legacy["data"]["elicitations"] == [legacy["elicitation"]]
    events = await db_events(elicitd, flow_id)
    assert [(e["type"], e["to_status"]) for e in events] == [("created", "pending")]


async def test_reuse_only_for_the_same_request(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        first = await create_external(http, subject)
        again = await http.post("/v1/flows", json=external_body(subject))
        other_url = await create_external(http, subject, url="https://app.example.com/other")
        other_subject = await create_external(http, Subject(iss=subject.iss, sub=subject.sub + "-2"))
    assert again.status_code == 200
    assert again.json()["flow"]["id"] == first["flow"]["id"]
    assert again.json()["flow"]["url"] == first["flow"]["url"]
    assert len({first["flow"]["id"], other_url["flow"]["id"], other_subject["flow"]["id"]}) == 3


async def test_concurrent_identical_creates_converge_on_one_flow(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        responses = await asyncio.gather(*(http.post("/v1/flows", json=external_body(subject)) for _ in range(20)))
    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert len({r.json()["flow"]["id"] for r in responses}) == 1


async def test_other_server_client_cannot_see_or_touch_a_flow(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    intruder = await new_server_client(elicitd)
    async with elicitd.http(server_client.api_key) as owner_http, elicitd.http(intruder.api_key) as other:
        created = await create_external(owner_http, subject)
        flow_id = created["flow"]["id"]
        assert (await other.get(f"/v1/flows/{flow_id}")).status_code == 404
        complete = await other.post(f"/v1/flows/{flow_id}/complete", json={"result": {"x": 1}})
        assert complete.status_code == 404
        assert complete.json()["code"] == "flow_not_found"
        resolve = await other.post("/v1/flows/resolve", json=resolve_body(created, subject))
        assert resolve.status_code == 400
        assert resolve.json()["code"] == "invalid_request_state"
        # The intruder's own identical request is a separate flow.
        theirs = await create_external(other, subject)
        assert theirs["flow"]["id"] != flow_id
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"


async def test_resolve_decline(elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        response = await http.post("/v1/flows/resolve", json=resolve_body(created, subject, "decline"))
    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "declined"
    assert body["flow"]["status"] == "declined"
    assert "mcp" not in body
    events = await db_events(elicitd, created["flow"]["id"])
    assert [(e["type"], e["actor"], e["to_status"]) for e in events][-1] == ("transition", "mcp_client", "declined")


async def test_resolve_cancel_keeps_flow_pending_and_reused(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        response = await http.post("/v1/flows/resolve", json=resolve_body(created, subject, "cancel"))
        assert response.status_code == 200
        assert response.json()["outcome"] == "cancelled"
        assert response.json()["flow"]["status"] == "pending"
        again = await http.post("/v1/flows", json=external_body(subject))
    assert again.status_code == 200
    assert again.json()["flow"]["id"] == created["flow"]["id"]
    assert (await db_flow(elicitd, created["flow"]["id"]))["status"] == "pending"
    assert [e["type"] for e in await db_events(elicitd, created["flow"]["id"])] == ["created", "client_cancelled"]


async def test_accept_while_pending_returns_state_only_input_required(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        first = (await http.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=0.2))).json()
        assert first["outcome"] == "input_required"
        assert set(first["mcp"]) == {"resultType", "requestState"}  # state-only: nobody is asked again
        # The client retries with the state-only state and no input responses: still pending.
        second = await http.post(
            "/v1/flows/resolve", json=resolve_body(created, subject, None, wait=0.2, state=first["mcp"]["requestState"])
        )
        assert second.json()["outcome"] == "input_required"
        assert "inputRequests" not in second.json()["mcp"]
        # A retry that ignores the URL request it was given gets the full request again.
        unanswered = await http.post("/v1/flows/resolve", json=resolve_body(created, subject, None))
        assert unanswered.json()["outcome"] == "input_required"
        assert unanswered.json()["mcp"]["inputRequests"] == created["mcp"]["inputRequests"]
        # Completion: the next retry gets the final result.
        done = await http.post(f"/v1/flows/{created['flow']['id']}/complete", json={"result": {"answer": 42}})
        assert done.status_code == 200
        final = (
            await http.post(
                "/v1/flows/resolve", json=resolve_body(created, subject, None, state=first["mcp"]["requestState"])
            )
        ).json()
    assert final["outcome"] == "completed"
    assert final["result"] == {"answer": 42}
    assert "mcp" not in final


async def test_resolve_rejects_keys_it_did_not_ask_for(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        body = resolve_body(created, subject)
        body["input_responses"]["elicitd_fl_" + "0" * 32] = {"action": "accept"}
        response = await http.post("/v1/flows/resolve", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


async def test_external_complete_and_fail_are_final(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        failed = await http.post(f"/v1/flows/{flow_id}/fail", json={"code": "card_declined", "message": "Declined."})
        assert failed.status_code == 200
        assert failed.json()["flow"]["status"] == "failed"
        assert failed.json()["flow"]["error"] == {"code": "card_declined", "message": "Declined."}
        again = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {}})
        assert again.status_code == 409
        assert again.json()["code"] == "flow_not_pending"
        resolved = (await http.post("/v1/flows/resolve", json=resolve_body(created, subject))).json()
        assert resolved["outcome"] == "failed"
    assert (await db_flow(elicitd, flow_id))["status"] == "failed"


async def test_complete_is_only_for_external_flows(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await http.post(
            "/v1/flows",
            json={
                "subject": subject_json(subject),
                "kind": "consent",
                "params": {"title": "Deploy", "description": "Deploy v2"},
            },
        )
        assert created.status_code == 201
        flow_id = created.json()["flow"]["id"]
        assert created.json()["flow"]["url"] == f"{elicitd.url}/f/{flow_id}"
        response = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"approved": True}})
    assert response.status_code == 400
    assert response.json()["code"] == "not_external"
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"


async def test_another_clients_flow_cannot_be_finished(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    """The completing statement names the caller's client: another client's flow is "not found"
    and stays as it was; its owner can still complete it."""
    other = await new_server_client(elicitd)
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
    flow_id = created["flow"]["id"]
    async with elicitd.http(other.api_key) as http:
        completed = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"by": "other"}})
        failed = await http.post(f"/v1/flows/{flow_id}/fail", json={"code": "nope"})
        unknown = await http.post("/v1/flows/fl_" + "0" * 32 + "/complete", json={"result": {}})
    assert [r.status_code for r in (completed, failed, unknown)] == [404, 404, 404]
    assert {r.json()["code"] for r in (completed, failed, unknown)} == {"flow_not_found"}
    assert (await db_flow(elicitd, flow_id))["status"] == "pending"
    async with elicitd.http(server_client.api_key) as http:
        mine = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"by": "owner"}})
    assert mine.status_code == 200
    assert mine.json()["flow"]["status"] == "completed"
    assert mine.json()["result"] == {"by": "owner"}
    events = await db_events(elicitd, flow_id)
    assert [(e["type"], e["actor"], e["to_status"]) for e in events] == [
        ("created", "api", "pending"),
        ("transition", "api", "completed"),
    ]


async def test_a_pending_flow_past_its_expiry_is_not_completed(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    """Past its time by the database clock (swept or not yet): the expiry wins."""
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        await force_expiry(elicitd, flow_id)
        late = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {}})
    assert late.status_code == 409
    assert late.json()["code"] == "flow_not_pending"
    # The app's sweeper may expire it meanwhile; nothing completes it.
    moved = [e["to_status"] for e in await db_events(elicitd, flow_id) if e["type"] == "transition"]
    status = (await db_flow(elicitd, flow_id))["status"]
    assert (status, moved) in (("pending", []), ("expired", ["expired"]))


async def test_expiry_by_database_clock(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        await force_expiry(elicitd, flow_id)
        status = (await http.get(f"/v1/flows/{flow_id}")).json()
        assert status["flow"]["status"] == "expired"
        resolved = (await http.post("/v1/flows/resolve", json=resolve_body(created, subject))).json()
        assert resolved["outcome"] == "expired"
        late = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {}})
        assert late.status_code == 409
        fresh = await http.post("/v1/flows", json=external_body(subject))
    assert fresh.status_code == 201
    assert fresh.json()["flow"]["id"] != flow_id
    events = await db_events(elicitd, flow_id)
    assert [(e["type"], e["to_status"]) for e in events] == [("created", "pending"), ("transition", "expired")]


async def test_pending_past_expiry_is_replaced_on_create(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        await force_expiry(elicitd, created["flow"]["id"])
        fresh = await http.post("/v1/flows", json=external_body(subject))
    assert fresh.status_code == 201
    assert fresh.json()["flow"]["id"] != created["flow"]["id"]
    assert (await db_flow(elicitd, created["flow"]["id"]))["status"] == "expired"


async def test_status_long_poll_returns_on_completion(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        waiting = asyncio.create_task(http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 20}))
        await parked(elicitd, flow_id)
        assert not waiting.done()
        await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
        response = await asyncio.wait_for(waiting, 5)
    assert response.json()["flow"]["status"] == "completed"
    assert response.json()["result"] == {"ok": True}


@pytest.mark.parametrize(
    ("method", "route", "status", "code"),
    [
        ("GET", "/v1/flows/{flow_id}", 404, "flow_not_found"),
        ("POST", "/v1/flows/resolve", 400, "invalid_request_state"),
    ],
)
async def test_a_flow_deleted_under_a_parked_long_poll_answers_its_error(
    elicitd: RunningApp,
    server_client: ServerClientHandle,
    subject: Subject,
    method: str,
    route: str,
    status: int,
    code: str,
) -> None:
    """The answer of a parked long-poll (a status read, or a resolve with ``accept``) is made after
    Litestar's exception handling has returned (``service.observability.requests.defer``): an
    error raised by the wait still gets the application's problem+json — the one the request
    would have had if the flow had been gone before it — and the request is counted with the
    status it was answered."""

    def answered() -> float:
        found = elicitd.services.metrics.registry.get_sample_value(
            "elicitd_http_requests_total", {"method": method, "route": route, "status": str(status)}
        )
        return found or 0.0

    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        loop = asyncio.get_running_loop()
        began = loop.time()
        if method == "GET":
            call = http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 1.5})
        else:
            call = http.post("/v1/flows/resolve", json=resolve_body(created, subject, "accept", wait=1.5))
        waiting = asyncio.create_task(call)
        await parked(elicitd, flow_id)
        await asyncio.sleep(0.3)  # past its one read: the flow was there, so the request waits
        counted = answered()
        async with elicitd.state.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM flows WHERE id = :id"), {"id": flow_id.removeprefix("fl_")})
        response = await asyncio.wait_for(waiting, 10)
        took = loop.time() - began
    assert 1.4 <= took < 5  # answered at the end of its wait, not by the handler
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code
    # Counted as the observer's last step, which may come just after the client has its answer.
    await until(lambda: answered() == counted + 1, what=f"the {status} counted")


async def test_status_wait_times_out_pending(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await create_external(http, subject)
        loop = asyncio.get_running_loop()
        start = loop.time()
        response = await http.get(f"/v1/flows/{created['flow']['id']}", params={"wait_seconds": 0.6})
        elapsed = loop.time() - start
    assert response.json()["flow"]["status"] == "pending"
    assert 0.55 <= elapsed < 3


async def test_status_wait_ends_when_its_clock_runs_out_not_before(
    make_settings: Callable[..., Settings], subject: Subject
) -> None:
    clock = ManualClock()
    async with running_app(make_settings(), clock=clock) as app:
        client = await new_server_client(app)
        async with app.http(client.api_key) as http:
            created = await create_external(http, subject)
            flow_id = created["flow"]["id"]
            waiting = asyncio.create_task(http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 20}))
            await parked(app, flow_id)
            clock.advance(19.9)
            # Whatever was due by now has fired; the wait must be parked on its last 0.1 s (a timer
            # that close is no background upkeep's), not answering.
            await until(
                lambda: waiting.done() or any(d <= 0.15 for d in clock.deadlines()), what="the last 0.1 s armed"
            )
            assert not waiting.done()
            clock.advance(0.2)
            response = await asyncio.wait_for(waiting, 5)
    assert response.status_code == 200
    assert response.json()["flow"]["status"] == "pending"
