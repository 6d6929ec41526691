"""A new kind is one package and one registry line: a throwaway kind, written to a temporary folder
and named in ``ELICITD_EXTRA_KINDS``, runs in ``elicitd serve`` with nothing else changed.

Its package builds its own services from the ``KindContext`` (a greeting and the flow service);
the test sees them reach the kind's page (``GET /f/{id}``) and its own route, and the flow it
creates go through the API like any other: created, read, finished by the kind, resolved. The
only other step a kind takes, the migration that adds its name to ``ck_flows_kind``, is played by
the DDL that migration would run, on a database of the test's own.
"""

from __future__ import annotations

import os
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from service.identity.clients import create_server_client
from service.kinds import BUILT_IN
from tests.faults.conftest import TEST_KEYS_ENV
from tests.support import backends
from tests.support.faults import replica

pytestmark = pytest.mark.slow

KIND = "throwaway"

PLUGIN = '''
"""A kind no one ships: its page and its route show the services its own factory built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, post

from service.db.base import FLOW_ID
from service.flows.kinds import BasicKind
from service.flows.plugins import KindPlugin
from service.flows.repository import Transition
from service.flows.service import FlowService
from service.flows.states import Actor, FlowStatus
from service.kind_context import KindContext


@dataclass(frozen=True, slots=True)
class ThrowawayServices:
    flows: FlowService
    greeting: str


def services(context: KindContext) -> ThrowawayServices:
    return ThrowawayServices(flows=context.flows, greeting=f"hello from {context.settings.public_url}")


async def page(request: Request[Any, Any, Any], flow: Any, services: ThrowawayServices) -> Response[str]:
    return Response(f"<p id=greeting>{services.greeting}</p>", media_type="text/html")


@post("/throwaway/{flow_ref:str}/done", status_code=200)
async def done(flow_ref: str, services: Any) -> dict[str, Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    assert flow_id is not None
    change = Transition(FlowStatus.COMPLETED, Actor.BROWSER, result={"said": services.greeting})
    moved = await services.flows.finish(flow_id, change)
    return {"finished": moved is not None}


def plugin(settings: Any) -> KindPlugin:
    return KindPlugin(
        name="throwaway",
        handler=BasicKind("throwaway", default_message="Say hello to continue."),
        page=page,
        routes=(done,),
        services=services,
    )
'''


async def _database_taking(server_url: str, kinds: list[str]) -> str:
    """A migrated database of its own whose ``flows`` accept ``kinds`` (what the kind's migration does)."""
    from service.db.migrate import upgrade_async
    from service.settings import normalize_database_url

    url = await backends.create_database(server_url)
    await upgrade_async(normalize_database_url(url))
    conn = await asyncpg.connect(url)
    try:
        listed = ", ".join(f"'{name}'" for name in kinds)
        await conn.execute(
            f"ALTER TABLE flows DROP CONSTRAINT ck_flows_kind, ADD CONSTRAINT ck_flows_kind CHECK (kind IN ({listed}))"
        )
    finally:
        await conn.close()
    return url


@pytest.fixture
async def kind_database(backend: backends.Backends) -> AsyncIterator[str]:
    url = await _database_taking(backend.server_url, [*BUILT_IN, KIND])
    yield url
    await backends.drop_database(backend.server_url, url)


async def test_a_throwaway_kind_is_one_package_and_one_registry_entry(
    backend: backends.Backends, kind_database: str, tmp_path: Path
) -> None:
    from service.settings import normalize_database_url

    package = tmp_path / "throwaway_kind"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(textwrap.dedent(PLUGIN))

    engine_url = normalize_database_url(kind_database)
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine(engine_url)
    try:
        async with async_sessionmaker(engine, expire_on_commit=False)() as session:
            client = await create_server_client(session, "throwaway-kind", subject_proof="none")
            await session.commit()
    finally:
        await engine.dispose()

    env = {
        "ELICITD_DATABASE_URL": engine_url,
        "ELICITD_REDIS_URL": backend.redis_url or "",
        "ELICITD_REDIS_CHANNEL": f"elicitd:test:{uuid.uuid4().hex[:8]}",
        "ELICITD_KEYS": TEST_KEYS_ENV,
        "ELICITD_EXTRA_KINDS": f"{KIND}=throwaway_kind.plugin",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    subject = {"iss": "https://id.example.com", "sub": "throwaway-user"}
    with replica(env, tmp_path / "serve.log") as running:
        bearer = {"Authorization": f"Bearer {client.api_key}"}
        async with httpx.AsyncClient(base_url=running.url, headers=bearer, timeout=30) as api:
            created = await api.post("/v1/flows", json={"subject": subject, "kind": KIND})
            assert created.status_code == 201, created.text
            body = created.json()
            flow_id = body["flow"]["id"]
            assert body["flow"]["kind"] == KIND
            assert body["flow"]["status"] == "pending"

            status = await api.get(f"/v1/flows/{flow_id}")
            assert status.status_code == 200
            assert status.json()["flow"]["status"] == "pending"

            # The kind's page, handed the services its own factory built.
            shown = await api.get(body["flow"]["url"], headers={"Authorization": ""})
            assert shown.status_code == 200, shown.text
            assert f"<p id=greeting>hello from {running.url}</p>" in shown.text

            # The kind's own route, with the same services.
            finished = await api.post(f"/throwaway/{flow_id}/done", headers={"Authorization": ""})
            assert finished.status_code == 200, finished.text
            assert finished.json() == {"finished": True}

            status = await api.get(f"/v1/flows/{flow_id}")
            assert status.json()["flow"]["status"] == "completed"
            assert status.json()["result"] == {"said": f"hello from {running.url}"}

            mcp = body["mcp"]
            key = next(iter(mcp.get("inputRequests", {})), None) or f"elicitd_{flow_id}"
            resolved = await api.post(
                "/v1/flows/resolve",
                json={
                    "subject": subject,
                    "request_state": mcp["requestState"],
                    "input_responses": {key: {"action": "accept"}},
                },
            )
            assert resolved.status_code == 200, resolved.text
            assert resolved.json()["outcome"] == "completed"
            assert resolved.json()["result"] == {"said": f"hello from {running.url}"}

            # An unknown kind is still refused: the registry grew by exactly the named one.
            refused = await api.post("/v1/flows", json={"subject": subject, "kind": "another"})
            assert refused.status_code == 400


def test_extra_kinds_are_plain_names_of_modules_and_never_a_built_in_one() -> None:
    """The names go into the API schema and the flows table's check constraint: plain words only."""
    from service.errors import ConfigurationError
    from service.kinds import extra_kinds, registry

    assert extra_kinds("") == {}
    assert extra_kinds(" survey = acme.survey.plugin , poll=acme.poll ,") == {
        "survey": "acme.survey.plugin",
        "poll": "acme.poll",
    }
    assert list(registry({"ELICITD_EXTRA_KINDS": "survey=acme.survey"})) == [*BUILT_IN, "survey"]
    for refused in ("survey", "Survey=acme", "su'rvey=acme", "survey=acme..plugin", "survey=", "=acme"):
        with pytest.raises(ConfigurationError, match="is not name=module"):
            extra_kinds(refused)
    for taken in ("consent=acme.consent", "survey=a.b,survey=c.d"):
        with pytest.raises(ConfigurationError, match="already registered"):
            extra_kinds(taken)


def test_the_container_names_no_kind() -> None:
    """No field of ``Services`` is typed from a kind's package: a kind's services are its own."""
    import dataclasses
    import typing

    from service.services import Services

    packages = {module.rsplit(".", 1)[0] for name, module in BUILT_IN.items() if name != "external"}
    hints = typing.get_type_hints(Services)
    named = {
        field.name: repr(hints[field.name])
        for field in dataclasses.fields(Services)
        if any(f"{package}." in repr(hints[field.name]) for package in packages)
    }
    assert packages == {"service.connect", "service.apikeys", "service.consent", "service.payments"}
    assert named == {}


def test_a_kinds_services_are_handed_out_only_as_the_type_they_were_built_as() -> None:
    from service.flows.kinds import BasicKind
    from service.flows.plugins import KindPlugin, MountedKind

    mounted = MountedKind(KindPlugin(name=KIND, handler=BasicKind(KIND, default_message="Hi.")), "built")
    assert mounted.serves(str) == "built"
    with pytest.raises(TypeError, match="the throwaway kind's services are not a int"):
        mounted.serves(int)
