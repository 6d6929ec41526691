"""Metrics, request logs and tracing on real instances (each test its own app, so counts are exact)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from service.db.base import CONNECTION_ID
from service.settings import Settings
from tests.admin.conftest import complete_flow, create_flow, hooked_client, make_connection, make_provider
from tests.connections.conftest import grant
from tests.support.apps import LogCapture, RunningApp, new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.waiting import parked


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    """A real OAuth server as the third-party provider whose tokens get refreshed."""
    with OAuthServer() as server:
        yield server


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def scrape(app: RunningApp) -> Samples:
    async with app.http() as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def test_metrics_count_exactly_what_happened(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings()) as app:
        client = await new_server_client(app)
        flows = [await create_flow(app, client) for _ in range(3)]
        assert (await complete_flow(app, client, flows[0])).status_code == 200
        assert (await complete_flow(app, client, flows[1])).status_code == 200
        async with app.http(client.api_key) as http:
            assert (await http.post(f"/v1/flows/{flows[2]}/fail", json={"code": "nope"})).status_code == 200
            assert (await http.get("/v1/flows/fl_notanid")).status_code == 404
            assert (await http.get("/no/such/route")).status_code == 404
        found = await scrape(app)
        second_app_found = None
        async with running_app(make_settings()) as other:  # a second app in the same process
            second_app_found = await scrape(other)
    assert value(found, "elicitd_flows_finished_total", kind="external", outcome="completed") == 2
    assert value(found, "elicitd_flows_finished_total", kind="external", outcome="failed") == 1
    assert value(found, "elicitd_flow_time_to_complete_seconds_count", kind="external", outcome="completed") == 2
    assert value(found, "elicitd_http_requests_total", method="POST", route="/v1/flows", status="201") == 3
    assert (
        value(found, "elicitd_http_requests_total", method="POST", route="/v1/flows/{flow_id}/complete", status="200")
        == 2
    )
    assert value(found, "elicitd_http_requests_total", method="GET", route="/v1/flows/{flow_id}", status="404") == 1
    assert value(found, "elicitd_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert value(found, "elicitd_http_request_duration_seconds_count", method="POST", route="/v1/flows") == 3
    assert value(found, "elicitd_waiters") == 0
    assert value(found, "elicitd_redis_fallback") == 0
    # Nothing leaks between app instances: the second one saw no flows and no requests.
    assert value(second_app_found, "elicitd_flows_finished_total", kind="external", outcome="completed") == 0
    assert value(second_app_found, "elicitd_http_requests_total", method="POST", route="/v1/flows", status="201") == 0


async def test_waiters_and_fallback_gauges_follow_the_hub(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(redis_url="redis://127.0.0.1:1/0")) as app:
        client = await new_server_client(app)
        flow_id = await create_flow(app, client)
        import asyncio

        async with app.http(client.api_key) as http:
            waiting = asyncio.create_task(http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 5}))
            await parked(app, flow_id)
            found = await scrape(app)
            assert (await complete_flow(app, client, flow_id)).status_code == 200
            assert (await waiting).json()["flow"]["status"] == "completed"
    assert value(found, "elicitd_waiters") == 1
    assert value(found, "elicitd_redis_fallback") == 1


_BACKLOG_OF_OTHERS = text(
    "SELECT count(*) FROM webhook_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL "
    "AND server_client_id <> :mine"
)


async def backlog_scrape(app: RunningApp, mine: uuid.UUID) -> tuple[float, int]:
    """The scraped backlog and, read just before and after it, the other server clients' share of it.

    The database is shared by the whole test session, so other modules' undelivered events count
    too; the scrape is retried until their share held still around it, which makes ours exact."""
    for _ in range(10):
        async with app.state.sessions() as session:
            before = (await session.execute(_BACKLOG_OF_OTHERS, {"mine": mine})).scalar_one()
        found = await scrape(app)
        async with app.state.sessions() as session:
            after = (await session.execute(_BACKLOG_OF_OTHERS, {"mine": mine})).scalar_one()
        if before == after:
            return value(found, "elicitd_webhook_backlog"), int(before)
    raise AssertionError("the other server clients' webhook backlog never held still")


async def test_webhook_backlog_counts_undelivered_events_exactly(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings()) as app:
        client, _ = await hooked_client(app)  # its webhook is a closed port: nothing gets delivered
        backlog, others = await backlog_scrape(app, client.id)
        assert backlog == others
        flows = [await create_flow(app, client) for _ in range(3)]
        assert (await complete_flow(app, client, flows[0])).status_code == 200
        assert (await complete_flow(app, client, flows[1])).status_code == 200
        async with app.http(client.api_key) as http:
            assert (await http.post(f"/v1/flows/{flows[2]}/fail", json={"code": "nope"})).status_code == 200
        backlog, others = await backlog_scrape(app, client.id)
        assert backlog == others + 3
        async with app.state.sessions() as session:
            delivered = (
                await session.execute(
                    text(
                        "SELECT count(*) FROM webhook_outbox WHERE server_client_id = :c AND delivered_at IS NOT NULL"
                    ),
                    {"c": client.id},
                )
            ).scalar_one()
        assert delivered == 0


async def _connection_subject(app: RunningApp, connection: str) -> tuple[str, str]:
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE authorizations SET expires_at = now() + interval '5 seconds' WHERE connection_id = :i"),
            {"i": CONNECTION_ID.parse(connection)},
        )
        iss, sub = (
            await session.execute(
                text("SELECT subject_iss, subject_sub FROM connections WHERE id = :i"),
                {"i": CONNECTION_ID.parse(connection)},
            )
        ).one()
        await session.commit()
    return str(iss), str(sub)


async def test_real_token_refreshes_are_counted_by_outcome(
    make_settings: Callable[..., Settings], oauth: OAuthServer
) -> None:
    """Two tokens near expiry fetched through the token endpoint: the provider refreshes one and
    answers ``invalid_grant`` for the other."""
    async with running_app(make_settings()) as app:
        provider = await make_provider(app, oauth)
        client = await new_server_client(app)
        fresh = await make_connection(app, oauth, provider)
        revoked = await make_connection(app, oauth, provider)
        for connection in (fresh, revoked):  # as the client's own connect flows would have left them
            await grant(app, connection, client, ["files:read"])
        async with app.http(client.api_key) as http:
            iss, sub = await _connection_subject(app, fresh)
            before = oauth.token_calls("refresh_token")
            refreshed = await http.get(f"/v1/connections/{provider}/token", params={"iss": iss, "sub": sub})
            assert refreshed.status_code == 200, refreshed.text
            assert oauth.token_calls("refresh_token") == before + 1
            iss, sub = await _connection_subject(app, revoked)
            oauth.fail_next_refresh("invalid_grant")
            refused = await http.get(f"/v1/connections/{provider}/token", params={"iss": iss, "sub": sub})
            assert refused.status_code == 409, refused.text
            assert refused.json()["code"] == "reauthorization_required"
        found = await scrape(app)
    assert value(found, "elicitd_token_refreshes_total", provider=provider, outcome="refreshed") == 1
    assert value(found, "elicitd_token_refreshes_total", provider=provider, outcome="reauthorization_required") == 1
    assert value(found, "elicitd_token_refreshes_total", provider=provider, outcome="failed") == 0


async def test_one_json_log_line_per_request_without_query_strings(make_settings: Callable[..., Settings]) -> None:
    capture = LogCapture()
    logger = logging.getLogger("elicitd.requests")
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    try:
        async with running_app(make_settings()) as app:
            client = await new_server_client(app)
            flow_id = await create_flow(app, client)
            async with app.http(client.api_key) as http:
                response = await http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 0, "secret": "MARKER-Q"})
            assert response.status_code == 200
    finally:
        logger.removeHandler(capture)
    lines = [json.loads(line) for line in capture.lines]
    gets = [line for line in lines if line.get("method") == "GET" and line["route"] == "/v1/flows/{flow_id}"]
    assert len(gets) == 1
    assert gets[0]["msg"] == "request"
    assert gets[0]["status"] == 200
    assert isinstance(gets[0]["duration_ms"], float)
    # The id is a field of its own (the flow this request concerns); the raw path and query are not logged.
    assert gets[0]["flow_id"] == flow_id
    assert set(gets[0]) == {
        "ts",
        "level",
        "logger",
        "msg",
        "method",
        "route",
        "status",
        "duration_ms",
        "flow_id",
        "server_client",
        "kind",
        "outcome",
    }
    assert not any("MARKER-Q" in line or f"/v1/flows/{flow_id}" in line for line in capture.lines)


async def test_tracing_records_one_span_per_request(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(extra={"OTEL_ENABLED": "true", "OTEL_EXPORTER": "memory"})
    async with running_app(settings) as app:
        client = await new_server_client(app)
        await create_flow(app, client)
        async with app.http() as http:
            assert (await http.get("/healthz")).status_code == 200
        memory = app.state.tracing.memory
        assert memory is not None
        spans = memory.get_finished_spans()
    names = [s.name for s in spans]
    assert names == ["POST /v1/flows", "GET /healthz"]
    from opentelemetry.trace import SpanKind, StatusCode

    assert [(s.kind, s.status.status_code) for s in spans] == [(SpanKind.SERVER, StatusCode.UNSET)] * 2
    attributes = spans[0].attributes
    assert attributes is not None
    assert attributes["http.response.status_code"] == 201
    assert attributes["http.route"] == "/v1/flows"
    assert spans[0].resource.attributes["service.name"] == "elicitd"


async def test_tracing_is_off_by_default(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings()) as app:
        assert app.state.tracing.enabled is False
        assert app.state.tracing.tracer is None


def test_metric_names_match_the_reference() -> None:
    from pathlib import Path

    reference = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text()
    section = reference.split("\n## Metrics reference\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(elicitd_[a-z_]+)`", section))
    assert {
        "elicitd_http_requests_total",
        "elicitd_http_request_duration_seconds",
        "elicitd_flows_finished_total",
        "elicitd_flow_time_to_complete_seconds",
        "elicitd_waiters",
        "elicitd_redis_fallback",
        "elicitd_webhook_backlog",
        "elicitd_webhook_deliveries_total",
        "elicitd_token_refreshes_total",
        "elicitd_connection_probes_total",
        "elicitd_connections",
        "elicitd_rate_limited_total",
        "elicitd_overloaded_total",
        "elicitd_event_loop_stall_seconds",
        "elicitd_event_loop_stall_max_seconds",
        "elicitd_event_loop_blocked_seconds",
        "elicitd_event_loop_blocked_max_seconds",
    } == documented
