"""Small helpers shared by the flow tests."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import text

from service.flows.schemas import Subject
from tests.support.apps import RunningApp


def subject_json(subject: Subject) -> dict[str, str]:
    return {"iss": subject.iss, "sub": subject.sub}


def external_body(subject: Subject, url: str = "https://app.example.com/step", **extra: Any) -> dict[str, Any]:
    return {"subject": subject_json(subject), "kind": "external", "url": url, **extra}


async def create_external(http: httpx.AsyncClient, subject: Subject, **extra: Any) -> dict[str, Any]:
    response = await http.post("/v1/flows", json=external_body(subject, **extra))
    assert response.status_code in (200, 201), response.text
    created: dict[str, Any] = response.json()
    return created


def resolve_body(
    created: dict[str, Any], subject: Subject, action: str | None = "accept", wait: float = 0, state: str | None = None
) -> dict[str, Any]:
    mcp = created["mcp"]
    key = next(iter(mcp.get("inputRequests", {})), None) or f"elicitd_{created['flow']['id']}"
    responses = {key: {"action": action}} if action else {}
    return {
        "subject": subject_json(subject),
        "request_state": state or mcp["requestState"],
        "input_responses": responses,
        "wait_seconds": wait,
    }


async def db_flow(app: RunningApp, flow_ref: str) -> dict[str, Any]:
    async with app.state.sessions() as session:
        row = (
            (await session.execute(text("SELECT * FROM flows WHERE id = :id"), {"id": flow_ref.removeprefix("fl_")}))
            .mappings()
            .one()
        )
        return dict(row)


async def db_events(app: RunningApp, flow_ref: str) -> list[dict[str, Any]]:
    async with app.state.sessions() as session:
        rows = (
            (
                await session.execute(
                    text("SELECT * FROM flow_events WHERE flow_id = :id ORDER BY id"),
                    {"id": flow_ref.removeprefix("fl_")},
                )
            )
            .mappings()
            .all()
        )
        return [dict(r) for r in rows]


async def force_expiry(app: RunningApp, flow_ref: str) -> None:
    """Move a flow's expiry into the past (by the database clock) without changing its status."""
    async with app.state.sessions() as session:
        await session.execute(
            text("UPDATE flows SET expires_at = now() - interval '1 second' WHERE id = :id"),
            {"id": flow_ref.removeprefix("fl_")},
        )
        await session.commit()
