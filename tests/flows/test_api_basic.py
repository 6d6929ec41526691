from __future__ import annotations

from service.flows.schemas import Subject
from tests.support.apps import RunningApp, ServerClientHandle


async def test_create_then_reuse_returns_same_flow(
    elicitd: RunningApp, server_client: ServerClientHandle, subject: Subject
) -> None:
    body = {
        "subject": {"iss": subject.iss, "sub": subject.sub},
        "kind": "external",
        "url": "https://app.example.com/step",
    }
    async with elicitd.http(server_client.api_key) as http:
        first = await http.post("/v1/flows", json=body)
        second = await http.post("/v1/flows", json=body)
    assert first.status_code == 201
    assert second.status_code == 200
    assert first.json()["flow"]["id"] == second.json()["flow"]["id"]
    assert first.json()["flow"]["url"] == second.json()["flow"]["url"] == "https://app.example.com/step"
