"""Health probes of stored API keys (``service.connections.key_probes``, the kind's
``service.apikeys.probes``) against real HTTP servers and real PostgreSQL.

The provider's check is the real OAuth test server's ``/api/me``, where a minted token stands in
for an API key: it answers 200 while the key is live and 401 once the grant is revoked there. A
refused key makes the connection ``needs_reauthorization`` in one pass (the key wiped, the event on
each grantee's stream and webhook outbox, the token endpoint answering 409), and entering a key
again recovers the same connection; a 5xx or a check that never answers marks nothing and rests
the provider; two replicas' passes check each key exactly once; the key is in no log line, event
or repr.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import text

from service.apikeys.plugin import ApiKeyKindServices
from service.apikeys.providers import get_api_key_provider, upsert_api_key_provider
from service.connections.key_probes import KeyProbes, KeyRequest
from service.connections.probes import Prober, ProbeSettings
from service.db.base import CONNECTION_ID, FLOW_ID
from service.flows.models import Flow
from tests.admin.conftest import answered_challenge
from tests.consent.helpers import new_sub
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client
from tests.support.clock import ManualClock
from tests.support.factories import grant_connection
from tests.support.hostile import Hang, hostile
from tests.support.oauth_server import OAuthServer


class Only:
    """The kinds' probes, narrowed to this test's providers: the database is shared with other
    modules, whose stored keys point at servers that are gone."""

    def __init__(self, kinds: tuple[KeyProbes, ...], *names: str) -> None:
        self.kinds, self.names = kinds, set(names)

    async def probeable(self) -> Mapping[str, KeyRequest]:
        found: dict[str, KeyRequest] = {}
        for kind in self.kinds:
            found.update({k: v for k, v in (await kind.probeable()).items() if k in self.names})
        return found


def prober(
    app: RunningApp, seen: list[tuple[str, str]], *names: str, clock: ManualClock | None = None, **settings: Any
) -> Prober:
    return Prober(
        app.state.connections,
        ProbeSettings(batch_size=5000, interval_seconds=3600.0, **settings),
        clock=clock,
        on_probe=lambda provider, outcome: seen.append((provider, outcome)) if provider in names else None,
        kinds=[Only(app.state.prober.keys.kinds, *names)],
    )


async def store_key(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str, sub: str, key: str
) -> str:
    """An ``api_key`` flow completed by the API-key service (what the form's POST calls); the ref."""
    async with app.http(client.api_key) as api:
        created = await api.post(
            "/v1/flows", json={"subject": {"iss": issuer.issuer, "sub": sub}, "kind": "api_key", "provider": provider}
        )
    assert created.status_code == 201, created.text
    flow_id = FLOW_ID.parse(created.json()["flow"]["id"])
    async with app.state.sessions() as session:
        flow = await session.get(Flow, flow_id)
        found = await get_api_key_provider(session, provider)
    assert flow is not None and found is not None
    apikeys = app.state.kind("api_key", ApiKeyKindServices).apikeys
    assert await apikeys.store(flow, found, key, {"region": "eu"}) is not None
    async with app.http(client.api_key) as api:
        token = await api.get(f"/v1/connections/{provider}/token", params={"iss": issuer.issuer, "sub": sub})
    assert token.status_code == 200, token.text
    ref: str = token.json()["connection_id"]
    return ref


async def row(app: RunningApp, ref: str) -> dict[str, Any]:
    async with app.state.sessions() as session:
        found = (
            await session.execute(text("SELECT * FROM connections WHERE id = :id"), {"id": CONNECTION_ID.parse(ref)})
        ).one()
    return dict(found._mapping)


async def make_due(app: RunningApp, *refs: str) -> None:
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE connections SET checked_at = now() - interval '2 hours' WHERE id = ANY(:ids)"),
            {"ids": [CONNECTION_ID.parse(ref) for ref in refs]},
        )
        await session.commit()


async def events(app: RunningApp, client: ServerClientHandle) -> list[tuple[str, dict[str, Any]]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, payload FROM events WHERE server_client_id = :c AND type LIKE 'connection.%' ORDER BY seq"
            ),
            {"c": client.id},
        )
        return [(r[0], r[1]) for r in rows]


async def queued(app: RunningApp, client: ServerClientHandle) -> list[str]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT event_type FROM webhook_outbox WHERE server_client_id = :c ORDER BY created_at"),
            {"c": client.id},
        )
        return [r[0] for r in rows]


def checks(issuer: OAuthServer) -> int:
    return issuer.stats().api_calls.get("/api/me", 0)


async def test_a_refused_key_needs_reauthorization_and_a_key_entered_again_recovers(
    app: RunningApp,
    client: ServerClientHandle,
    issuer: OAuthServer,
    provider: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sub = new_sub("keys")
    key = issuer.mint(sub, scope="files:read")["access_token"]
    ref = await store_key(app, client, issuer, provider, sub, key)
    other = await new_server_client(app, display_name="Acme Billing")
    await grant_connection(app, ref, other.id, [])  # a second server may use the same key
    async with app.state.sessions() as session:
        await session.execute(
            # Webhooks (their secret never opened here: nothing is delivered to port 9).
            text(
                "UPDATE server_clients SET webhook_url = 'http://127.0.0.1:9/hook', webhook_secret_enc = '\\x00', "
                "webhook_secret_key_id = 'k' WHERE id = ANY(:c)"
            ),
            {"c": [client.id, other.id]},
        )
        await session.commit()
    for hooked in (client, other):
        await answered_challenge(app, hooked.id)  # verified once; nothing answers on port 9 now
    stored = await row(app, ref)
    assert (stored["health"], stored["refresh_claim"]) == ("healthy", None)
    assert stored["checked_at"] is not None  # the live check at entry counts as one
    seen: list[tuple[str, str]] = []
    before = checks(issuer)

    await prober(app, seen, provider).run_once()  # checked at entry: not due
    assert (seen, checks(issuer) - before) == ([], 0)

    await make_due(app, ref)
    await prober(app, seen, provider).run_once()
    assert (seen, checks(issuer) - before) == ([(provider, "ok")], 1)
    checked = await row(app, ref)
    assert (checked["health"], checked["refresh_claim"]) == ("healthy", None)
    assert checked["checked_at"] > stored["checked_at"]

    issuer.revoke_grant(key)  # the key was revoked at the service
    await make_due(app, ref)
    caplog.set_level(logging.DEBUG, logger="elicitd")
    await prober(app, seen, provider).run_once()
    await make_due(app, ref)
    await prober(app, seen, provider).run_once()  # marked already: not checked, nobody told again

    assert seen[1:] == [(provider, "needs_reauthorization")]
    assert checks(issuer) - before == 2
    refused = await row(app, ref)
    assert (refused["status"], refused["health"], refused["health_reason"], refused["health_http_status"]) == (
        "reauthorization_required",
        "needs_reauthorization",
        "probe_unauthorized",
        401,
    )
    assert (refused["access_token_enc"], refused["refresh_claim"]) == (None, None)
    for grantee in (client, other):
        told = await events(app, grantee)
        assert [kind for kind, _ in told] == ["connection.needs_reauthorization"]
        assert {k: told[0][1][k] for k in ("connection_id", "provider", "status", "reason", "http_status")} == {
            "connection_id": ref,
            "provider": provider,
            "status": "needs_reauthorization",
            "reason": "probe_unauthorized",
            "http_status": 401,
        }
        assert await queued(app, grantee) == ["connection.needs_reauthorization"]
    async with app.http(client.api_key) as api:
        token = await api.get(f"/v1/connections/{provider}/token", params={"iss": issuer.issuer, "sub": sub})
    assert (token.status_code, token.json()["code"]) == (409, "reauthorization_required")

    fresh = issuer.mint(sub, scope="files:read")["access_token"]
    assert await store_key(app, client, issuer, provider, sub, fresh) == ref  # the same connection

    recovered = await row(app, ref)
    assert (recovered["status"], recovered["health"], recovered["health_reason"]) == ("active", "healthy", None)
    for grantee in (client, other):
        kinds = [kind for kind, _ in await events(app, grantee)]
        assert kinds == ["connection.needs_reauthorization", "connection.recovered"]
    payloads = [payload for grantee in (client, other) for _, payload in await events(app, grantee)]
    for secret in (key, fresh):
        assert secret not in caplog.text
        assert secret not in repr(payloads)


async def test_a_5xx_or_a_check_that_never_answers_marks_nothing_and_rests_the_provider(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str
) -> None:
    with hostile(default=Hang()) as silent:
        hanging = f"hang-{uuid.uuid4().hex[:6]}"
        async with app.state.sessions() as session:
            await upsert_api_key_provider(
                session,
                hanging,
                "Hang API",
                {
                    "fields": [{"name": "region", "label": "Region"}],
                    "check": {"url": silent.url + "/me", "auth": "header", "header": "X-Key", "timeout_seconds": 1},
                },
            )
            await session.commit()
        sub = new_sub("storm")
        key = issuer.mint(sub, scope="files:read")["access_token"]
        refs = [
            await store_key(app, client, issuer, provider, sub, key),
            await store_key(app, client, issuer, hanging, sub, "hk_" + uuid.uuid4().hex),
        ]
        await make_due(app, *refs)
        clock = ManualClock()
        seen: list[tuple[str, str]] = []
        storm = prober(app, seen, provider, hanging, clock=clock, retry_seconds=300.0)
        issuer.fail_next_api(503, count=1)
        before = checks(issuer)

        await storm.run_once()
        await storm.run_once()  # within the rest: neither provider is called at all

        assert sorted(seen) == sorted([(hanging, "unknown"), (provider, "unknown")])
        assert (checks(issuer) - before, silent.requests) == (1, ["/me"])
        for ref in refs:
            untouched = await row(app, ref)
            assert (untouched["status"], untouched["health"], untouched["health_reason"]) == (
                "active",
                "healthy",
                None,
            )
            assert (untouched["refresh_claim"], untouched["access_token_enc"] is not None) == (None, True)

        clock.advance(301)
        await storm.run_once()  # rested long enough: both are due still, and asked again
        assert sorted(seen[2:]) == sorted([(hanging, "unknown"), (provider, "ok")])
    assert await events(app, client) == []


async def test_two_replicas_check_each_key_once(
    app: RunningApp, client: ServerClientHandle, issuer: OAuthServer, provider: str
) -> None:
    refs = []
    for _ in range(4):
        sub = new_sub("pair")
        refs.append(await store_key(app, client, issuer, provider, sub, issuer.mint(sub)["access_token"]))
    await make_due(app, *refs)
    seen: list[tuple[str, str]] = []
    before = checks(issuer)

    await asyncio.gather(prober(app, seen, provider).run_once(), prober(app, seen, provider).run_once())
    await prober(app, seen, provider).run_once()  # checked now: not again within the interval

    assert (seen, checks(issuer) - before) == ([(provider, "ok")] * 4, 4)
    for ref in refs:
        checked = await row(app, ref)
        assert (checked["health"], checked["refresh_claim"]) == ("healthy", None)


async def test_the_request_that_carries_a_key_does_not_show_it(app: RunningApp, provider: str) -> None:
    (request_for,) = (await Only(app.state.prober.keys.kinds, provider).probeable()).values()
    request = request_for("sk_live_planted_marker", {"region": "eu"})
    assert request.headers["Authorization"] == "Bearer sk_live_planted_marker"
    assert "sk_live_planted_marker" not in repr(request)
