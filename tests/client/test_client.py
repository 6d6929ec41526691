"""``ElicitdClient`` against a real elicitd (PostgreSQL, Redis, uvicorn) and a real flaky server."""

from __future__ import annotations

import asyncio
import time

import pytest

from elicitd_client import (
    ElicitdClient,
    ElicitdUnavailable,
    FlowNotFound,
    FlowNotPending,
    InvalidRequest,
    InvalidRequestState,
    NotConnected,
    ServerError,
    Subject,
    Unauthenticated,
)
from service.flows import schemas
from tests.client.flaky_server import flaky_server
from tests.support.apps import RunningApp, ServerClientHandle, free_port
from tests.support.waiting import parked

PAGE = "https://app.example.com/step"


def _subject(subject: schemas.Subject) -> Subject:
    """The client library's own Subject for the service-side one the ``subject`` fixture gives."""
    return Subject(subject.iss, subject.sub)


async def test_create_reuse_complete_status(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with ElicitdClient(elicitd.url, server_client.api_key) as client:
        first = await client.create_flow(_subject(subject), "external", url=PAGE, context={"tool": "t"})
        again = await client.create_flow(_subject(subject), "external", url=PAGE)
        assert (first.created, again.created) == (True, False)
        assert first.flow.id == again.flow.id and first.flow.id.startswith("fl_")
        assert first.status == "pending" and first.flow.url == PAGE
        assert first.flow.subject == _subject(subject)
        key = f"elicitd_{first.flow.id}"
        assert first.mcp is not None and first.mcp["resultType"] == "input_required"
        assert first.mcp["inputRequests"][key]["params"]["url"] == PAGE
        assert first.request_state == first.mcp["requestState"]
        assert first.elicitation is not None
        assert (first.elicitation["mode"], first.elicitation["elicitationId"], first.elicitation["url"]) == (
            "url",
            first.flow.id,
            PAGE,
        )
        assert first.legacy is not None and first.legacy["code"] == -32042

        pending = await client.status(first.flow.id)
        assert pending.flow.status == "pending" and pending.result is None and not pending.flow.terminal
        done = await client.complete(first.flow.id, {"ok": True})
        assert done.flow.status == "completed" and done.result == {"ok": True} and done.flow.terminal
        assert (await client.status(first.flow.id)).result == {"ok": True}

        with pytest.raises(FlowNotPending) as refused:
            await client.fail(first.flow.id, "too_late")
        assert (refused.value.code, refused.value.status) == ("flow_not_pending", 409)


async def test_resolve_waits_for_completion_and_reports_outcomes(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with ElicitdClient(elicitd.url, server_client.api_key) as client:
        created = await client.create_flow(_subject(subject), "external", url=PAGE)
        key = f"elicitd_{created.flow.id}"
        assert created.request_state is not None

        async def complete_later() -> None:
            await parked(elicitd, created.flow.id)  # completed while the resolve below waits
            await client.complete(created.flow.id, {"n": 1})

        finisher = asyncio.create_task(complete_later())
        started = time.monotonic()
        resolved = await client.resolve(
            _subject(subject), created.request_state, {key: {"action": "accept"}}, wait_seconds=10
        )
        await finisher
        assert resolved.outcome == "completed" and resolved.result == {"n": 1}
        assert time.monotonic() - started < 5

        other = await client.create_flow(_subject(subject), "external", url=PAGE + "?b")
        assert other.request_state is not None
        pending = await client.resolve(
            _subject(subject), other.request_state, {f"elicitd_{other.flow.id}": {"action": "accept"}}, wait_seconds=0.2
        )
        assert pending.outcome == "input_required" and pending.state_only
        cancelled = await client.resolve(
            _subject(subject), other.request_state, {f"elicitd_{other.flow.id}": {"action": "cancel"}}
        )
        assert cancelled.outcome == "cancelled" and cancelled.flow.status == "pending"
        declined = await client.resolve(
            _subject(subject), other.request_state, {f"elicitd_{other.flow.id}": {"action": "decline"}}
        )
        assert declined.outcome == "declined" and declined.flow.status == "declined"


async def test_errors_carry_the_problem_code(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with ElicitdClient(elicitd.url, "ek_wrong") as stranger:
        with pytest.raises(Unauthenticated) as unauth:
            await stranger.status("fl_0190a000000070008000000000000000")
    assert (unauth.value.code, unauth.value.status) == ("unauthenticated", 401)
    assert "ek_wrong" not in str(unauth.value.problem)

    async with ElicitdClient(elicitd.url, server_client.api_key) as client:
        with pytest.raises(FlowNotFound) as missing:
            await client.status("fl_0190a000000070008000000000000000")
        assert (missing.value.code, missing.value.status) == ("flow_not_found", 404)

        with pytest.raises(InvalidRequest) as invalid:
            await client.create_flow(_subject(subject), "external")  # no url
        assert (invalid.value.code, invalid.value.status) == ("invalid_request", 400)
        assert "url" in invalid.value.detail

        created = await client.create_flow(_subject(subject), "external", url=PAGE)
        assert created.request_state is not None
        with pytest.raises(InvalidRequestState) as tampered:
            await client.resolve(_subject(subject), created.request_state[:-4] + "AAAA")
        assert (tampered.value.code, tampered.value.status) == ("invalid_request_state", 400)
        with pytest.raises(InvalidRequestState):
            await client.resolve(Subject(subject.iss, "someone-else"), created.request_state)


async def test_retries_what_may_pass_then_succeeds(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with flaky_server(elicitd.url, ["503 retry-after=0", "502", "504"]) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=3, backoff=0.01) as client:
            created = await client.create_flow(_subject(subject), "external", url=PAGE)
    assert created.created is True and created.status == "pending"
    assert flaky.seen == [("POST", "/v1/flows")] * 4


@pytest.mark.parametrize(
    ("step", "status", "code"),
    [
        ("503 code=payments_unavailable", 503, "payments_unavailable"),
        ("500 code=internal_error", 500, "internal_error"),
    ],
)
async def test_a_permanent_5xx_is_raised_at_once_with_its_code(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject, step: str, status: int, code: str
) -> None:
    # A 503 without Retry-After, or a 500, answers the same on every attempt: one request only.
    async with flaky_server(elicitd.url, [step]) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=3, backoff=0.01) as client:
            with pytest.raises(ServerError) as refused:
                await client.create_flow(_subject(subject), "external", url=PAGE)
    assert (refused.value.code, refused.value.status, refused.value.detail) == (code, status, f"flaky {code}")
    assert flaky.seen == [("POST", "/v1/flows")]


async def test_payments_unavailable_from_a_real_elicitd_is_not_retried(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    # This elicitd has no payment provider: its 503 is permanent and carries no Retry-After.
    async with flaky_server(elicitd.url) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=3, backoff=0.01) as client:
            with pytest.raises(ServerError) as refused:
                await client.create_flow(
                    _subject(subject), "payment", params={"amount": 500, "currency": "usd", "description": "report"}
                )
    assert (refused.value.code, refused.value.status) == ("payments_unavailable", 503)
    assert "ELICITD_STRIPE_SECRET_KEY" in refused.value.detail
    assert flaky.seen == [("POST", "/v1/flows")]


async def test_retries_dropped_connections(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with flaky_server(elicitd.url, ["drop", "drop"]) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=2, backoff=0.01) as client:
            created = await client.create_flow(_subject(subject), "external", url=PAGE)
    assert created.status == "pending" and len(flaky.seen) == 3


async def test_gives_up_after_the_last_retry(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with flaky_server(elicitd.url, ["503 retry-after=0"] * 10) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=2, backoff=0.01) as client:
            with pytest.raises(ElicitdUnavailable) as failed:
                await client.create_flow(_subject(subject), "external", url=PAGE)
    assert (failed.value.code, failed.value.status) == ("unavailable", 503)
    assert failed.value.detail == "elicitd answered HTTP 503 after 3 attempts"
    assert len(flaky.seen) == 3

    # A provider behind elicitd failing keeps its own code once the retries are spent.
    async with flaky_server(elicitd.url, ["502 code=provider_refresh_failed"] * 10) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=1, backoff=0.01) as client:
            with pytest.raises(ElicitdUnavailable) as upstream:
                await client.create_flow(_subject(subject), "external", url=PAGE)
    assert (upstream.value.code, upstream.value.status) == ("provider_refresh_failed", 502)
    assert len(flaky.seen) == 2

    # Nothing listening at all: connection refused, retried, then unavailable.
    async with ElicitdClient(f"http://127.0.0.1:{free_port()}", "k", retries=1, backoff=0.01) as client:
        with pytest.raises(ElicitdUnavailable) as refused:
            await client.status("fl_x")
    assert "ConnectError" in refused.value.detail


async def test_4xx_is_not_retried(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with flaky_server(elicitd.url) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=3, backoff=0.01) as client:
            with pytest.raises(InvalidRequest):
                await client.create_flow(_subject(subject), "external", url="ftp://nope.example.com/x")
    assert len(flaky.seen) == 1


async def test_complete_whose_answer_was_lost_is_recognised(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with ElicitdClient(elicitd.url, server_client.api_key) as direct:
        created = await direct.create_flow(_subject(subject), "external", url=PAGE)
    async with flaky_server(elicitd.url, ["forward-drop"]) as flaky:
        async with ElicitdClient(flaky.url, server_client.api_key, retries=2, backoff=0.01) as client:
            done = await client.complete(created.flow.id, {"paid": 1})
            assert done.flow.status == "completed" and done.result == {"paid": 1}
            # The same lost-answer retry for a *different* terminal state is a real conflict.
            flaky.script.append("forward-drop")
            with pytest.raises(FlowNotPending):
                await client.fail(created.flow.id, "nope")
    complete_path = f"/v1/flows/{created.flow.id}/complete"
    assert flaky.seen[:3] == [("POST", complete_path), ("POST", complete_path), ("GET", f"/v1/flows/{created.flow.id}")]


async def test_token_for_a_subject_without_connection(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: schemas.Subject
) -> None:
    async with ElicitdClient(elicitd.url, server_client.api_key) as client:
        with pytest.raises(NotConnected) as missing:
            await client.token("github", _subject(subject), scopes=["repo"])
    assert (missing.value.code, missing.value.status) == ("not_connected", 404)
