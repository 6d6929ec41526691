"""``elicitd keys rotate`` run as an operator would: a separate process, while the service serves.

Every registered encrypted column is filled through the product's own code paths (a real OAuth
connect over HTTP, tokens the provider really minted, the admin webhook code, an API-key flow,
issuers and providers with client secrets) by an instance on the old key ring. Then the CLI runs
with the new key first while a second instance, already on the new ring, keeps answering the
token endpoint and keeps writing new secrets — some of them into the very rows being re-keyed.
Afterwards every value must be under the new key and open with a ring holding only that key.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admin import endpoints
from service.admin.clients import rotate_webhook_secret, set_webhook
from service.apikeys.plugin import ApiKeyKindServices
from service.apikeys.providers import get_api_key_provider, upsert_api_key_provider
from service.connections.providers import ProviderSpec, upsert_provider
from service.crypto.columns import ENCRYPTED_COLUMNS, EncryptedColumn
from service.crypto.vault import Vault
from service.db.base import FLOW_ID
from service.db.engine import make_engine, make_sessionmaker
from service.flows.models import Flow
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.rotation import GRANTS_LABEL
from service.settings import KeyRing, Settings
from tests.connections.conftest import PROVIDER_CLIENT_ID, grant, register_provider
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.factories import plant_connection
from tests.support.oauth_server import OAuthServer
from tests.support.waiting import until

OLD = KeyRing.generate_entry("rotold")
NEW = KeyRing.generate_entry("rotnew")
OLD_ID, NEW_ID = "rotold", "rotnew"
PROVIDER = "files-rot"
API_KEY_PROVIDER = "acme-rot"
LOGIN_CLIENT, LOGIN_SECRET = "rot-login", "rot-login-secret-value"


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture
async def fresh_database(backend: backends.Backends) -> AsyncIterator[str]:
    """A database of its own: rotation rewrites every row, which must not touch other tests' data."""
    async with backends.migrated_database(backend.server_url) as url:
        yield url


# ---- reading every registered column ------------------------------------------------------------
Cell = tuple[str, str]  # (column label, row id)


async def read_column(sessions: async_sessionmaker[AsyncSession], c: EncryptedColumn) -> list[Any]:
    async with sessions() as session:
        rows = await session.execute(
            text(
                f"SELECT {c.id_column} AS id, {c.key_id_column} AS key_id, {c.blob_column} AS blob, "
                f"{c.owner_sql} AS owner, CAST(:purpose AS text) AS purpose, "
                f"ARRAY[{', '.join(c.bound_sql) or 'NULL'}]::text[] AS bound "
                f"FROM {c.table} WHERE {c.key_id_column} IS NOT NULL"
            ),
            {"purpose": c.purpose},
        )
        return list(rows)


def bound_of(c: EncryptedColumn, row: Any) -> tuple[str, ...]:
    """The owner's fields the column binds (a connection's issuer, subject, provider, account)."""
    return tuple(row.bound) if c.bound_sql else ()


def row_id(value: Any) -> str:
    return value.hex() if isinstance(value, bytes) else str(value)


async def open_everything(
    sessions: async_sessionmaker[AsyncSession], vault: Vault
) -> tuple[dict[Cell, str], dict[Cell, str]]:
    """Every stored value in clear (opened with ``vault``) and the key id it is stored under."""
    plain: dict[Cell, str] = {}
    key_ids: dict[Cell, str] = {}
    for c in ENCRYPTED_COLUMNS:
        for row in await read_column(sessions, c):
            cell = (c.label, row_id(row.id))
            key_ids[cell] = row.key_id
            plain[cell] = vault.decrypt_text(
                row.key_id, row.blob, owner=row.owner, purpose=row.purpose, bound=bound_of(c, row)
            )
    return plain, key_ids


# ---- filling the vault through the product ------------------------------------------------------
@dataclass
class World:
    app: RunningApp
    client: ServerClientHandle
    clients: list[ServerClientHandle] = field(default_factory=list)
    subs: dict[str, str] = field(default_factory=dict)  # sub -> provider
    access: dict[str, str] = field(default_factory=dict)  # connection ref -> access token
    refresh: dict[str, str] = field(default_factory=dict)  # connection ref -> refresh token
    conn_sub: dict[str, str] = field(default_factory=dict)  # connection ref -> sub
    webhook: dict[str, str] = field(default_factory=dict)  # client public id -> webhook secret
    # client public id -> its legacy endpoint's id (which holds the same secret, migration 0018)
    legacy_endpoint: dict[str, str] = field(default_factory=dict)
    planted: set[str] = field(default_factory=set)  # secrets the test itself chose
    keys: set[str] = field(default_factory=set)  # connection refs holding an API key (on the connection row)

    def access_cell(self, ref: str) -> Cell:
        """Where a connection's secret is kept: an API key on the connection row, an OAuth token on
        its first authorization (which takes the connection's id)."""
        table = "connections" if ref in self.keys else "authorizations"
        return (f"{table}.access_token_enc", str(uuid.UUID(ref[3:])))

    def oauth_refs(self) -> list[str]:
        return sorted(ref for ref in self.access if ref not in self.keys)


async def mint_connection(app: RunningApp, oauth: OAuthServer, world: World, sub: str, expires_in: int = 3600) -> str:
    """Tokens the provider really issued, stored by the connection service (as a callback does)."""
    ref, minted = await plant_connection(
        app, oauth, PROVIDER, iss=oauth.issuer, sub=sub, login=sub, client_id=PROVIDER_CLIENT_ID, expires_in=expires_in
    )
    await grant(app, ref, world.client, ["files:read"])  # as the connect flow that stored it would
    world.subs[sub] = PROVIDER
    world.conn_sub[ref] = sub
    world.access[ref] = minted["access_token"]
    world.refresh[ref] = minted["refresh_token"]
    return ref


async def follow(http: httpx.AsyncClient, response: httpx.Response, app: RunningApp) -> httpx.Response:
    """Follow redirects that stay on elicitd (the test plays the provider's side by hand)."""
    while response.status_code in (302, 303) and (
        response.headers["location"].startswith("/") or response.headers["location"].startswith(app.url)
    ):
        response = await http.get(response.headers["location"])
    return response


async def connect_over_http(app: RunningApp, oauth: OAuthServer, world: World, sub: str) -> str:
    """A complete oauth_connect flow without a browser: login at the issuer, Continue, provider
    login, callback. Leaves a login attempt and an OAuth state (both vault-encrypted) behind."""
    async with app.http(world.client.api_key) as api:
        created = await api.post(
            "/v1/flows",
            json={"subject": {"iss": oauth.issuer, "sub": sub}, "kind": "oauth_connect", "provider": PROVIDER},
        )
    assert created.status_code == 201, created.text
    flow = created.json()["flow"]
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as http:
        start = await http.get(f"/f/{flow['id']}")
        start = await follow(http, start, app)
        assert start.status_code == 303 and start.headers["location"].startswith(oauth.issuer)
        back = oauth.login_without_browser(start.headers["location"], sub)
        page = await follow(http, await http.get(str(back)), app)
        assert page.status_code == 200, page.text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf is not None
        to_provider = await http.post(f"/connect/{flow['id']}/continue", data={"csrf_token": csrf.group(1)})
        assert to_provider.status_code == 303, to_provider.text
        callback = oauth.login_without_browser(to_provider.headers["location"], sub)
        done = await follow(http, await http.get(str(callback)), app)
        assert done.status_code == 200, done.text
    async with app.http(world.client.api_key) as api:
        status = (await api.get(f"/v1/flows/{flow['id']}")).json()
        assert status["flow"]["status"] == "completed", status
        token = await api.get(f"/v1/connections/{PROVIDER}/token", params={"iss": oauth.issuer, "sub": sub})
    assert token.status_code == 200, token.text
    ref: str = token.json()["connection_id"]
    world.subs[sub] = PROVIDER
    world.conn_sub[ref] = sub
    world.access[ref] = token.json()["access_token"]
    [issued] = [t for t in oauth.tokens(kind="refresh", sub=sub, status="active") if t.client_id == PROVIDER_CLIENT_ID]
    world.refresh[ref] = issued.token
    return ref


async def api_key_connection(app: RunningApp, oauth: OAuthServer, world: World, sub: str, key: str) -> str:
    """An ``api_key`` flow completed by the API-key service (what the form's POST calls)."""
    async with app.http(world.client.api_key) as api:
        created = await api.post(
            "/v1/flows",
            json={"subject": {"iss": oauth.issuer, "sub": sub}, "kind": "api_key", "provider": API_KEY_PROVIDER},
        )
    assert created.status_code == 201, created.text
    flow_id = FLOW_ID.parse(created.json()["flow"]["id"])
    async with app.state.sessions() as session:
        flow = await session.get(Flow, flow_id)
        provider = await get_api_key_provider(session, API_KEY_PROVIDER)
    assert flow is not None and provider is not None
    assert await app.state.kind("api_key", ApiKeyKindServices).apikeys.store(flow, provider, key, {}) is not None
    async with app.http(world.client.api_key) as api:
        token = await api.get(f"/v1/connections/{API_KEY_PROVIDER}/token", params={"iss": oauth.issuer, "sub": sub})
    assert token.status_code == 200, token.text
    assert token.json()["access_token"] == key
    ref: str = token.json()["connection_id"]
    world.subs[sub] = API_KEY_PROVIDER
    world.conn_sub[ref] = sub
    world.access[ref] = key
    world.keys.add(ref)
    world.planted.add(key)
    return ref


async def fill_vault(app: RunningApp, oauth: OAuthServer, *, connections: int) -> World:
    """Put real data in every registered encrypted column, on the old key ring."""
    oauth.register_client(LOGIN_CLIENT, LOGIN_SECRET, redirect_uris=[app.url + "/auth/callback"])
    async with app.state.sessions() as session:
        await upsert_issuer(
            session,
            app.state.vault,
            IssuerConfig(
                issuer=oauth.issuer, client_id=LOGIN_CLIENT, client_secret=LOGIN_SECRET, display_name="Test ID"
            ),
        )
        for n in range(4):
            await upsert_issuer(
                session,
                app.state.vault,
                IssuerConfig(
                    issuer=f"https://id{n}.rot.example",
                    client_id=f"c{n}",
                    client_secret=f"issuer-secret-{n}",
                    # RFC 7662 credentials are a vault value too: rotation must re-key them.
                    introspection_endpoint=f"https://id{n}.rot.example/introspect",
                    introspection_client_id=f"introspect-{n}",
                    introspection_client_secret=f"introspection-secret-{n}",
                ),
            )
        for name in ("github", "slack", "notion"):
            await upsert_provider(
                session,
                ProviderSpec(name=name, client_id=f"{name}-id", client_secret=f"{name}-client-secret"),
                app.state.vault,
            )
        await upsert_api_key_provider(session, API_KEY_PROVIDER, "Acme API", {"min_length": 20})
        await session.commit()
    app.state.issuers.forget()
    await register_provider(app, oauth, PROVIDER)
    world = World(app=app, client=await new_server_client(app, display_name="Rotation Assistant"))
    world.planted |= {
        LOGIN_SECRET,
        "github-client-secret",
        "slack-client-secret",
        "notion-client-secret",
        *(f"issuer-secret-{n}" for n in range(4)),
    }
    for _ in range(5):
        handle = await new_server_client(app)
        async with app.state.sessions() as session:
            shown = await set_webhook(session, app.state.vault, handle.public_id, "http://127.0.0.1:9/hook")
            await session.commit()
        assert shown.webhook_secret is not None
        world.clients.append(handle)
        world.webhook[handle.public_id] = shown.webhook_secret
        async with app.state.sessions() as session:  # a second endpoint, its secret rotated in grace
            made = await endpoints.create(
                session, app.state.vault, handle.public_id, endpoints.CreateEndpoint(url="http://127.0.0.1:9/other")
            )
            rotation = endpoints.RotateEndpointSecret(grace_seconds=3600)
            rotated = await endpoints.rotate_secret(session, app.state.vault, made.endpoint.id, rotation, 0.0)
            await session.commit()
        world.planted |= {made.secret, rotated.secret}
        legacy = next(e for e in (await _endpoints_of(app, handle.public_id)) if e.legacy)
        world.legacy_endpoint[handle.public_id] = str(uuid.UUID(legacy.id[3:]))
    for _ in range(4):  # complete connects: login attempts, OAuth states, connections
        await connect_over_http(app, oauth, world, f"web-{uuid.uuid4().hex[:8]}")
    async with httpx.AsyncClient(base_url=app.url) as http:  # two logins left half-way: pending attempts
        for _ in range(2):
            async with app.http(world.client.api_key) as api:
                flow = (
                    await api.post(
                        "/v1/flows",
                        json={
                            "subject": {"iss": oauth.issuer, "sub": "someone"},
                            "kind": "oauth_connect",
                            "provider": PROVIDER,
                        },
                    )
                ).json()
            assert (await follow(http, await http.get(f"/f/{flow['flow']['id']}"), app)).status_code == 303
    for n in range(4):  # more than one batch of API keys on connection rows
        await api_key_connection(app, oauth, world, f"key-{uuid.uuid4().hex[:8]}", f"acme-key-{n}-{uuid.uuid4().hex}")
    for _ in range(connections):
        await mint_connection(app, oauth, world, f"mint-{uuid.uuid4().hex[:8]}")
    return world


async def _endpoints_of(app: RunningApp, public_id: str) -> list[endpoints.EndpointView]:
    async with app.state.sessions() as session:
        return (await endpoints.list_endpoints(session, public_id)).items


def expected_cells(world: World, plain: dict[Cell, str]) -> dict[Cell, str]:
    """What the test knows each connection and webhook cell holds (the rest: the snapshot)."""
    known = dict(plain)
    for ref, token in world.access.items():
        known[world.access_cell(ref)] = token
    for ref, token in world.refresh.items():
        known[("authorizations.refresh_token_enc", str(uuid.UUID(ref[3:])))] = token
    for public_id, secret in world.webhook.items():
        known[("server_clients.webhook_secret_enc", str(uuid.UUID(public_id[3:])))] = secret
        known[("webhook_endpoints.secret_enc", world.legacy_endpoint[public_id])] = secret
    return known


def settings_for(make_settings: Callable[..., Settings], url: str, keys: str) -> Settings:
    return make_settings(
        database_url=url, keys=KeyRing.parse(keys, name="ring"), redis_channel=f"elicitd:rot:{uuid.uuid4().hex[:8]}"
    )


async def run_cli(url: str, keys: str, *args: str) -> tuple[int, dict[str, Any], str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
        "ELICITD_KEYS": keys,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "keys",
        "rotate",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, json.loads(out), err.decode()


async def test_rotate_cli_while_serving(
    fresh_database: str, make_settings: Callable[..., Settings], oauth: OAuthServer
) -> None:
    url = fresh_database
    async with running_app(settings_for(make_settings, url, OLD)) as old_app:
        world = await fill_vault(old_app, oauth, connections=24)
        before, key_ids = await open_everything(old_app.state.sessions, Vault(KeyRing.parse(OLD, name="old")))
    for c in ENCRYPTED_COLUMNS:  # every column holds more rows than one batch, all under the old key
        held = sum(1 for cell in before if cell[0] == c.label)
        if c.label == "connections.refresh_token_enc":
            assert held == 0  # refresh tokens live on authorizations; an API key has none
        else:
            assert held > 3, c.label
    assert set(key_ids.values()) == {OLD_ID}
    expected = expected_cells(world, before)
    assert expected == before  # the snapshot holds exactly what the product was given
    assert world.planted <= set(before.values())

    original_webhooks = dict(world.webhook)
    ring = f"{NEW},{OLD}"
    refreshing = world.oauth_refs()[-3:]  # these get refreshed at the provider during the rotation
    mint_refs = [r for r in world.access if world.subs[world.conn_sub[r]] == PROVIDER]
    async with running_app(settings_for(make_settings, url, ring)) as app:
        world.app = app
        stop = asyncio.Event()
        problems: list[str] = []
        served = 0
        written = 0
        refreshed_by_app: set[str] = set()
        new_cells: dict[Cell, str] = {}

        async def read_tokens() -> None:
            nonlocal served
            async with app.http(world.client.api_key) as api:
                while not stop.is_set():
                    for ref, sub in list(world.conn_sub.items()):
                        provider = world.subs[sub]
                        answer = await api.get(
                            f"/v1/connections/{provider}/token", params={"iss": oauth.issuer, "sub": sub}
                        )
                        served += 1
                        if answer.status_code != 200:
                            problems.append(f"{ref}: {answer.status_code} {answer.text}")
                            continue
                        token = answer.json()["access_token"]
                        if token != world.access[ref]:
                            if ref in refreshing and oauth.token(token).status == "active":
                                world.access[ref] = token  # a refresh happened: from now on, this one
                                refreshed_by_app.add(ref)
                            else:
                                problems.append(f"{ref}: wrong token")

        async def write_secrets() -> None:
            nonlocal written
            n = 0
            while not stop.is_set():
                sub = f"live-{uuid.uuid4().hex[:8]}"
                ref = await mint_connection(app, oauth, world, sub)
                new_cells[world.access_cell(ref)] = world.access[ref]
                new_cells[("authorizations.refresh_token_enc", str(uuid.UUID(ref[3:])))] = world.refresh[ref]
                handle = world.clients[n % len(world.clients)]
                async with app.state.sessions() as session:
                    shown = await rotate_webhook_secret(session, app.state.vault, handle.public_id)
                    await session.commit()
                assert shown.webhook_secret is not None
                world.webhook[handle.public_id] = shown.webhook_secret
                written += 1
                n += 1
                await asyncio.sleep(0.01)  # the writer's pace (a trickle beside the reads), not a wait

        async def refresh_midway() -> None:
            """Once the CLI has re-keyed the issuers, make three tokens due so the app refreshes
            them (row lock, provider call, new ciphertexts) while their rows are being re-keyed."""

            async def issuers_rekeyed() -> bool:
                async with app.state.sessions() as session:
                    done = (
                        await session.execute(
                            text("SELECT count(*) FROM issuers WHERE client_secret_key_id = :k"), {"k": NEW_ID}
                        )
                    ).scalar_one()
                return bool(done)

            await until(lambda: stop.is_set() or issuers_rekeyed(), timeout=120, what="the CLI re-keying the issuers")
            if stop.is_set():
                return
            async with app.state.sessions() as session:
                await session.execute(
                    text("UPDATE authorizations SET expires_at = now() + interval '5 seconds' WHERE id = ANY(:ids)"),
                    {"ids": [uuid.UUID(r[3:]) for r in refreshing]},
                )
                await session.commit()

        oauth.set_token_delay(0.2)  # each refresh holds its connection's row lock a while
        tasks = [
            asyncio.create_task(read_tokens()),
            asyncio.create_task(write_secrets()),
            asyncio.create_task(refresh_midway()),
        ]
        one_pass = len(world.conn_sub)
        try:
            await until(lambda: served >= one_pass and written >= 1, timeout=60, what="reads and writes under way")
            started = time.monotonic()
            code, report, stderr = await run_cli(url, ring, "--batch", "3", "--json")
            took = time.monotonic() - started
            assert code == 0, (report, stderr)
            # Serving goes on under the rotated ring: another full pass of reads, another write,
            # and the refreshes made due midway answered.
            served_then, written_then = served, written
            await until(
                lambda: (
                    served >= served_then + one_pass and written > written_then and refreshed_by_app == set(refreshing)
                ),
                timeout=60,
                what="reads, writes and refreshes after the rotation",
            )
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            oauth.set_token_delay(0)
        assert problems == []
        assert served > 50 and written > 3, (served, written)
        assert refreshed_by_app == set(refreshing)
        assert code == 0, (report, stderr)
        assert report["current_key_id"] == NEW_ID
        assert set(report["rotated"]) == {c.label for c in ENCRYPTED_COLUMNS} | {GRANTS_LABEL}
        assert all(v == [] for v in report["failed"].values()), report
        assert all(v == 0 for v in report["remaining"].values()), report
        # Rows the app rewrote (new webhook secrets) may have been re-keyed by the CLI or not.
        rewritten = {
            "server_clients.webhook_secret_enc": sum(
                1 for ref, secret in world.webhook.items() if secret != original_webhooks[ref]
            )
        }
        # The legacy endpoint mirrors the old columns (migration 0018's trigger): the same rows again.
        rewritten["webhook_endpoints.secret_enc"] = rewritten["server_clients.webhook_secret_enc"]
        for c in ENCRYPTED_COLUMNS:
            old_rows = sum(1 for cell in before if cell[0] == c.label)
            app_rows = rewritten.get(c.label, 0)
            if c.table == "authorizations":
                # A refresh rewrites both tokens; it may land before or after the CLI re-keyed them.
                assert old_rows - len(refreshing) <= report["rotated"][c.label] <= old_rows, (c.label, report)
            else:
                assert old_rows - app_rows <= report["rotated"][c.label] <= old_rows, (c.label, report)

        # The refreshed connections hold the provider's newest tokens, not the re-keyed old ones.
        for ref in refreshing:
            world.refresh[ref] = oauth.token(world.refresh[ref]).replaced_by or ""
        want = {**expected_cells(world, before), **new_cells}
        new_only = Vault(KeyRing.parse(NEW, name="new"))
        after, after_keys = await open_everything(app.state.sessions, new_only)
        assert set(after_keys.values()) == {NEW_ID}
        assert after == want
        for ref in mint_refs:
            assert world.access[ref] in after.values()

        again_code, again, _ = await run_cli(url, ring, "--batch", "3", "--json")
        assert again_code == 0
        assert set(again["rotated"].values()) == {0} and set(again["remaining"].values()) == {0}

    # An instance holding only the new key serves every connection and refreshes at the provider
    # (its client secret re-keyed too).
    async with running_app(settings_for(make_settings, url, NEW)) as new_app, new_app.http(world.client.api_key) as api:
        for ref, sub in world.conn_sub.items():
            answer = await api.get(f"/v1/connections/{world.subs[sub]}/token", params={"iss": oauth.issuer, "sub": sub})
            assert answer.status_code == 200, answer.text
            assert answer.json()["access_token"] == world.access[ref]
        forced = await new_app.state.connections.refresh_by_id(uuid.UUID(mint_refs[0][3:]))
        assert forced is not None
        async with new_app.state.sessions() as session:
            kid = (
                await session.execute(
                    text("SELECT access_token_key_id FROM authorizations WHERE id = :i"),
                    {"i": uuid.UUID(mint_refs[0][3:])},
                )
            ).scalar_one()
        assert kid == NEW_ID
    print(f"rotation CLI took {took:.2f}s; {served} token answers and {written} write rounds meanwhile")


async def test_rotate_cli_reports_a_moved_ciphertext_and_rekeys_the_rest(
    fresh_database: str, make_settings: Callable[..., Settings], oauth: OAuthServer
) -> None:
    url = fresh_database
    async with running_app(settings_for(make_settings, url, OLD)) as old_app:
        world = await fill_vault(old_app, oauth, connections=6)
        before, _ = await open_everything(old_app.state.sessions, Vault(KeyRing.parse(OLD, name="old")))
        victim, source = world.oauth_refs()[1], world.oauth_refs()[0]
        victim_id, source_id = uuid.UUID(victim[3:]), uuid.UUID(source[3:])
        async with old_app.state.sessions() as session:
            # Move one connection's access-token ciphertext onto another connection's row.
            await session.execute(
                text(
                    "UPDATE authorizations SET access_token_enc = "
                    "(SELECT access_token_enc FROM authorizations WHERE id = :s) "
                    "WHERE id = :v"
                ),
                {"s": source_id, "v": victim_id},
            )
            await session.commit()
            moved = (
                await session.execute(
                    text("SELECT access_token_key_id, access_token_enc FROM authorizations WHERE id = :v"),
                    {"v": victim_id},
                )
            ).one()

    ring = f"{NEW},{OLD}"
    code, report, _ = await run_cli(url, ring, "--batch", "3", "--json")
    assert code == 1
    label = "authorizations.access_token_enc"
    failed: dict[str, list[str]] = {c.label: [] for c in ENCRYPTED_COLUMNS}
    assert report["failed"] == {**failed, GRANTS_LABEL: [], label: [str(victim_id)]}
    assert all(v == 0 for v in report["remaining"].values()), report
    old_counts = {c.label: sum(1 for cell in before if cell[0] == c.label) for c in ENCRYPTED_COLUMNS}
    rotated = dict(report["rotated"])
    macs = rotated.pop(GRANTS_LABEL)
    assert rotated == {**old_counts, label: old_counts[label] - 1}

    engine = make_engine(settings_for(make_settings, url, ring))
    try:
        sessions = make_sessionmaker(engine)
        async with sessions() as session:
            assert macs == (await session.execute(text("SELECT count(*) FROM grants"))).scalar_one()
            row = (
                await session.execute(
                    text("SELECT access_token_key_id, access_token_enc FROM authorizations WHERE id = :v"),
                    {"v": victim_id},
                )
            ).one()
        assert tuple(row) == tuple(moved)  # left exactly as it was
        new_only = Vault(KeyRing.parse(NEW, name="new"))
        for c in ENCRYPTED_COLUMNS:
            for r in await read_column(sessions, c):
                cell = (c.label, row_id(r.id))
                if cell == (label, str(victim_id)):
                    continue
                assert r.key_id == NEW_ID, cell
                opened = new_only.decrypt_text(r.key_id, r.blob, owner=r.owner, purpose=r.purpose, bound=bound_of(c, r))
                assert opened == before[cell]
    finally:
        await engine.dispose()

    # A later rotation still refuses that row, and only that row.
    code, again, _ = await run_cli(url, ring, "--batch", "3", "--json")
    assert code == 1
    assert again["failed"][label] == [str(victim_id)]
    assert set(again["rotated"].values()) == {0}


async def test_rotate_cli_waits_for_a_row_the_app_holds(
    fresh_database: str, make_settings: Callable[..., Settings], oauth: OAuthServer
) -> None:
    """A refresh holds its connection's row lock for the whole provider call. The CLI skips the
    locked row at first (it never blocks other rows), but must come back to it, not give up."""
    url = fresh_database
    ring = f"{NEW},{OLD}"
    async with running_app(settings_for(make_settings, url, OLD)) as old_app:
        world = await fill_vault(old_app, oauth, connections=4)
    async with running_app(settings_for(make_settings, url, ring)) as app:
        oauth.configure(rotate_refresh_tokens=False)  # the refresh leaves the old refresh token in place
        held = next(iter(r for r in world.access if world.subs[world.conn_sub[r]] == PROVIDER))
        async with app.state.sessions() as session:
            await session.execute(
                text("UPDATE authorizations SET expires_at = now() + interval '5 seconds' WHERE id = :i"),
                {"i": uuid.UUID(held[3:])},
            )
            await session.commit()
        oauth.set_token_delay(6)
        try:
            async with app.http(world.client.api_key) as api:
                refreshes = oauth.token_calls("refresh_token")
                refresh = asyncio.create_task(
                    api.get(
                        f"/v1/connections/{PROVIDER}/token", params={"iss": oauth.issuer, "sub": world.conn_sub[held]}
                    )
                )
                # The rotation starts once the app's refresh is at the provider (which answers in 6 s).
                await until(lambda: oauth.token_calls("refresh_token") > refreshes, what="the refresh at the provider")
                code, report, stderr = await run_cli(url, ring, "--batch", "3", "--json")
                answer = await refresh
        finally:
            oauth.set_token_delay(0)
            oauth.configure(rotate_refresh_tokens=True)
        assert answer.status_code == 200
        assert code == 0, (report, stderr)
        assert all(v == 0 for v in report["remaining"].values()), report
        async with app.state.sessions() as session:
            kids = (
                await session.execute(
                    text("SELECT access_token_key_id, refresh_token_key_id FROM authorizations WHERE id = :i"),
                    {"i": uuid.UUID(held[3:])},
                )
            ).one()
        assert tuple(kids) == (NEW_ID, NEW_ID)
