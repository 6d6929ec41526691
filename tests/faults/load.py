"""Open-loop load for the fault tests, and the checks every fault test makes on what it got back.

Open loop: request *i* is sent at ``start + i / rate`` whatever happened to the earlier ones, as
independent MCP servers and browsers would send them; a stalled dependency cannot slow the load
down and so hide its own failures.

The mix touches every surface that reads or writes PostgreSQL: flow creations and completions
(acknowledged writes, checked afterwards), API reads, the browser entry page (HTML) and an admin
read (problem+json). An answer is either what that request answers when all is well, or ``503``
with ``Retry-After`` in the surface's own format; anything else fails the test.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.db.base import FLOW_ID

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "faults"

# What each operation answers when its dependencies are fine.
HEALTHY = {"create": 201, "complete": 200, "read": 200, "page": 200, "admin": 200}
OPS = ("create", "complete", "read", "page", "admin")


@dataclass(slots=True)
class Answer:
    op: str
    sent: float  # the event loop's clock when the request was sent
    seconds: float  # until the answer (or the transport error)
    status: int  # 0 when no HTTP answer came at all
    retry_after: str | None = None
    content_type: str = ""
    body: bytes = b""
    flow: str | None = None  # the flow it created or concerns
    value: int | None = None  # the result a completion stored
    target: str = ""  # which instance was asked (FlowWorkload.name)

    @property
    def ok(self) -> bool:
        return self.status == HEALTHY[self.op]


@dataclass
class FlowWorkload:
    """One operation per call, cycling through ``OPS``; completions use flows made beforehand."""

    api: httpx.AsyncClient
    admin: httpx.AsyncClient
    pages: httpx.AsyncClient
    pending: list[str]
    reads: list[str]
    iss: str = "https://id.example.com"
    name: str = ""
    _next_pending: int = 0
    counts: Counter[str] = field(default_factory=Counter)

    async def __call__(self, i: int) -> Answer:
        op = OPS[i % len(OPS)]
        self.counts[op] += 1
        loop = asyncio.get_running_loop()
        sent = loop.time()
        flow: str | None = None
        value: int | None = None
        try:
            if op == "create":
                body = {
                    "subject": {"iss": self.iss, "sub": f"load-{uuid.uuid4().hex[:12]}"},
                    "kind": "external",
                    "url": "https://app.example.com/step",
                }
                response = await self.api.post("/v1/flows", json=body)
                if response.status_code in (200, 201):
                    flow = response.json()["flow"]["id"]
            elif op == "complete":
                flow = self.pending[self._next_pending]
                self._next_pending += 1
                value = i
                response = await self.api.post(f"/v1/flows/{flow}/complete", json={"result": {"n": i}})
            elif op == "read":
                flow = self.reads[i % len(self.reads)]
                response = await self.api.get(f"/v1/flows/{flow}")
            elif op == "page":
                flow = self.reads[i % len(self.reads)]
                response = await self.pages.get(f"/f/{flow}")
            else:
                flow = self.reads[i % len(self.reads)]
                response = await self.admin.get(f"/admin/v1/flows/{flow}")
        except httpx.HTTPError as exc:  # no HTTP answer at all: named in the body for the report
            return Answer(
                op,
                sent,
                loop.time() - sent,
                0,
                body=type(exc).__name__.encode(),
                flow=flow,
                value=value,
                target=self.name,
            )
        return Answer(
            op,
            sent,
            loop.time() - sent,
            response.status_code,
            response.headers.get("retry-after"),
            response.headers.get("content-type", ""),
            response.content,
            flow,
            value,
            self.name,
        )


async def make_flows(http: httpx.AsyncClient, count: int, tag: str) -> list[str]:
    """``count`` pending external flows, each for a subject of its own; their ids."""
    made: list[str] = []
    for start in range(0, count, 25):
        bodies = [
            {
                "subject": {"iss": "https://id.example.com", "sub": f"seed-{tag}-{start + i}"},
                "kind": "external",
                "url": "https://app.example.com/step",
            }
            for i in range(min(25, count - start))
        ]
        answers = await asyncio.gather(*(http.post("/v1/flows", json=b) for b in bodies))
        assert [a.status_code for a in answers] == [201] * len(bodies), [a.text for a in answers]
        made.extend(a.json()["flow"]["id"] for a in answers)
    return made


async def open_loop(
    rate: float, seconds: float, operation: Callable[[int], Coroutine[object, object, Answer]]
) -> list[Answer]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks: list[asyncio.Task[Answer]] = []
    for i in range(math.ceil(rate * seconds)):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(operation(i)))
    return list(await asyncio.gather(*tasks))


def unexpected(answers: Sequence[Answer]) -> list[str]:
    """Every answer that is neither the healthy one nor a well-formed 503 of its surface."""
    wrong = []
    for a in answers:
        if a.ok:
            continue
        problem = a.op != "page"
        # At ELICITD_MAX_IN_FLIGHT requests waiting on the dependency, the next is refused at once
        # with 503 overloaded (service/admission.py), problem+json on every surface, pages included.
        codes = ("unavailable", "overloaded") if problem else ("overloaded",)
        well_formed = (
            a.status == 503
            and a.retry_after is not None
            and a.retry_after.isdigit()
            and int(a.retry_after) >= 1
            and (
                (a.content_type.startswith("application/problem+json") and json.loads(a.body).get("code") in codes)
                or (not problem and a.content_type.startswith("text/html") and b"Try again in a moment" in a.body)
            )
        )
        if not well_formed:
            wrong.append(f"{a.op} at {a.sent:.3f}: {a.status} {a.content_type} {a.body[:200]!r}")
    return wrong


def statuses(answers: Sequence[Answer]) -> dict[int, int]:
    return dict(sorted(Counter(a.status for a in answers).items()))


async def lost_writes(sessions: async_sessionmaker[AsyncSession], answers: Sequence[Answer]) -> list[str]:
    """Acknowledged creations missing, or acknowledged completions not stored as acknowledged.

    A completion answered 503 may or may not have committed (the connection can drop after the
    commit but before the answer): it must then be either still pending or completed with the
    very value it sent, never anything else."""
    created = [FLOW_ID.parse(a.flow) for a in answers if a.op == "create" and a.ok and a.flow]
    completions = [a for a in answers if a.op == "complete" and a.flow]
    ids = [i for i in created if i is not None] + [FLOW_ID.parse(a.flow) for a in completions if a.flow]
    async with sessions() as session:
        rows = (
            await session.execute(text("SELECT id, status, result FROM flows WHERE id = ANY(:ids)"), {"ids": ids})
        ).all()
    found = {row.id: row for row in rows}
    lost = [f"created {FLOW_ID.format(i)} missing" for i in created if i is not None and i not in found]
    for a in completions:
        flow_id = FLOW_ID.parse(a.flow or "")
        row = found.get(flow_id) if flow_id is not None else None
        stored = row is not None and row.status == "completed" and row.result == {"n": a.value}
        if a.ok and not stored:
            lost.append(f"completion of {a.flow} acknowledged but stored as {row and (row.status, row.result)}")
        if not a.ok and not stored and (row is None or row.status != "pending"):
            lost.append(f"completion of {a.flow} answered {a.status} but stored as {row and (row.status, row.result)}")
    return lost


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def record(name: str, figures: dict[str, Any]) -> None:
    """Print the figures (``pytest -s`` shows them) and keep them in ``tests/artifacts/faults/``."""
    line = json.dumps({"test": name, **figures}, default=str)
    print(f"\n[faults] {line}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / "figures.jsonl").open("a") as out:
        out.write(line + "\n")
