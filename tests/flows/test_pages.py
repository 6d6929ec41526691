"""The browser URL for unknown, finished and expired flows: clear pages, never a stack trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from service.flows.schemas import Subject
from service.services import Services
from service.settings import Settings
from tests.flows.helpers import create_external, force_expiry
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app


@pytest.mark.parametrize("flow_ref", ["fl_" + "0" * 32, "nonsense", "fl_<script>"])
async def test_unknown_flow_page(elicitd: RunningApp, flow_ref: str) -> None:
    async with elicitd.http() as http:
        response = await http.get(f"/f/{flow_ref}")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "<h1>Link not found</h1>" in response.text
    assert "<script>" not in response.text
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"


async def test_finished_and_expired_pages(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        done = await create_external(http, subject)
        await http.post(f"/v1/flows/{done['flow']['id']}/complete", json={"result": {}})
        expired = await create_external(http, Subject(iss=subject.iss, sub=subject.sub + "-e"))
        await force_expiry(elicitd, expired["flow"]["id"])
        pending = await create_external(http, Subject(iss=subject.iss, sub=subject.sub + "-p"))
        pages = {
            name: await http.get(f"/f/{created['flow']['id']}")
            for name, created in (("done", done), ("expired", expired), ("pending", pending))
        }
    assert pages["done"].status_code == 200
    assert "<h1>All done</h1>" in pages["done"].text
    assert pages["expired"].status_code == 410
    assert "<h1>This link has expired</h1>" in pages["expired"].text
    # A pending external flow points the user at the caller's own page.
    assert pages["pending"].status_code == 200
    assert 'href="https://app.example.com/step"' in pages["pending"].text
    for response in pages.values():
        assert elicitd.url in response.text  # the elicitd domain is always shown


async def test_kind_without_a_page_says_so(make_settings: Callable[..., Settings], subject: Subject) -> None:
    """A kind whose plugin brings no page: ``GET /f/{id}`` answers 501, the flow stays pending."""
    from service.db.base import FLOW_ID, uuid7
    from service.flows import repository

    def without_payment_page(services: Services) -> Services:
        kinds = {
            n: replace(k, plugin=replace(k.plugin, page=None)) if n == "payment" else k
            for n, k in services.kinds.items()
        }
        return replace(services, kinds=kinds)

    async with running_app(make_settings(), customize=without_payment_page) as app:
        server_client = await new_server_client(app)
        flow_id = uuid7()
        async with app.state.sessions() as session:
            await repository.FlowStatements.insert_pending(
                session,
                {
                    "id": flow_id,
                    "server_client_id": server_client.id,
                    "subject_iss": subject.iss,
                    "subject_sub": subject.sub,
                    "kind": "payment",
                    "reuse_key": "k",
                    "provider": None,
                    "scopes": [],
                    "params": {},
                    "context": {},
                    "message": "Pay",
                    "external_url": None,
                    "connection_id": None,
                    "ttl_seconds": 60,
                },
            )
            await session.commit()
        async with app.http(server_client.api_key) as http:
            page = await http.get(f"/f/{FLOW_ID.format(flow_id)}")
            status = (await http.get(f"/v1/flows/{FLOW_ID.format(flow_id)}")).json()
    assert page.status_code == 501
    assert "<h1>Not available yet</h1>" in page.text
    assert status["flow"]["status"] == "pending"


async def test_health_and_ready(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
        schema = await http.get("/schema/openapi.json")
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200
    body = ready.json()
    unproven = body.pop("clients_without_subject_proof")
    groups = body.pop("trust_groups_allowing_unproven")
    body.pop("warnings", None)  # present while another test's group allows unproven members
    assert body == {"status": "ready", "postgres": "ok", "redis": "ok", "wakeups": "redis", "schema": "current"}
    # The shared database holds the tests' clients, which name users without their tokens.
    assert isinstance(unproven, int) and unproven >= 0
    assert isinstance(groups, int) and groups >= 0
    paths = schema.json()["paths"]
    for path, method, operation in [
        ("/v1/flows", "post", "createFlow"),
        ("/v1/flows/resolve", "post", "resolveFlow"),
        ("/v1/flows/{flow_id}", "get", "getFlow"),
        ("/v1/flows/{flow_id}/complete", "post", "completeExternalFlow"),
        ("/v1/flows/{flow_id}/fail", "post", "failExternalFlow"),
    ]:
        assert paths[path][method]["operationId"] == operation


async def test_openapi_documents_problem_answers(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    create = schema["paths"]["/v1/flows"]["post"]["responses"]
    assert {"200", "201", "400", "401", "403", "413", "429"} <= set(create)
    assert "application/problem+json" in create["401"]["content"]
    problem = schema["components"]["schemas"]["Problem"]
    assert set(problem["properties"]) == {"type", "title", "status", "code", "detail"}
    token = schema["paths"]["/v1/connections/{provider}/token"]["get"]["responses"]
    assert {"200", "404", "409"} <= set(token)
