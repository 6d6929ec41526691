"""``service.flows.hot``: status reads and resolves answered outside Litestar's routing answer
exactly as Litestar's routing does.

Two real instances share the database: ``elicitd`` (hot routes on, the default) and ``plain``
(``hot_routes=False``: every request through Litestar). Each request below goes to both, and the
two answers must be the same bytes: status, every header the application sets, body. Which path
answered is checked too: an ordinary request must not reach Litestar's route in the hot instance,
and anything else must reach it (it is Litestar's to answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from litestar._asgi.asgi_router import ASGIRouter
from litestar.handlers import HTTPRouteHandler
from sqlalchemy import text

from service.admission import Admission
from service.app import create_app
from service.errors import ConfigurationError
from service.flows.hot import HotFlowRoutes
from service.flows.schemas import Subject
from service.hosts import HostCheck
from service.observability.requests import RequestObserver
from service.services import build_services
from service.settings import Settings
from tests.flows.helpers import create_external, resolve_body, subject_json
from tests.support.apps import LogCapture, RunningApp, ServerClientHandle, new_server_client, running_app

# uvicorn's own headers, the same on both paths but not the same second.
_SERVER_HEADERS = {"date", "server"}
_ID = re.compile(r"fl_[0-9a-f]{32}")
_STATE = re.compile(rb"v2\.[A-Za-z0-9_-]+\.[0-9]+\.[A-Za-z0-9_-]{40,}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


@pytest.fixture(scope="module")
async def plain(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    async with running_app(make_settings(hot_routes=False)) as app:
        yield app


@pytest.fixture
def routed() -> Iterator[dict[int, int]]:
    """How many requests each application's Litestar router took (by ``id`` of the app)."""
    counts: dict[int, int] = {}
    original = ASGIRouter.__call__

    async def counting(self: ASGIRouter, scope: Any, receive: Any, send: Any) -> None:
        key = id(scope["litestar_app"])
        counts[key] = counts.get(key, 0) + 1
        await original(self, scope, receive, send)

    ASGIRouter.__call__ = counting  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        ASGIRouter.__call__ = original  # type: ignore[method-assign]


class Answer:
    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = [
            (k.lower(), ", ".join(sorted(v.split(", "))) if k.lower() == "allow" else v)
            for k, v in response.headers.multi_items()
            if k.lower() not in _SERVER_HEADERS
        ]
        # A fresh request state is sealed with a fresh nonce: the same length, other bytes.
        self.body = _STATE.sub(lambda m: b"<state:%d>" % len(m.group()), response.content)

    def normalized(self, url: str = "") -> tuple[int, list[tuple[str, str]], str]:
        """Ids and times replaced (and ``url``, when given), for answers about two flows made alike."""
        text = _TIME.sub("<time>", _ID.sub("<flow>", self.body.decode()))
        if url:
            text = text.replace(url, "<url>")
        headers = [(k, v) for k, v in self.headers if k != "content-length"]
        return self.status, headers, text

    def __repr__(self) -> str:
        return f"{self.status} {self.headers} {self.body[:400]!r}"


async def send(app: RunningApp, method: str, path: str, **kwargs: Any) -> Answer:
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as http:
        return Answer(await http.request(method, path, **kwargs))


async def both(
    hot: RunningApp, plain: RunningApp, routed: dict[int, int], method: str, path: str, *, taken: bool, **kwargs: Any
) -> Answer:
    """The request to both instances: the same answer; ``taken``: whether the hot layer answered."""
    before = routed.get(id(hot.app), 0)
    first = await send(hot, method, path, **kwargs)
    through_litestar = routed.get(id(hot.app), 0) - before
    second = await send(plain, method, path, **kwargs)
    assert (first.status, first.headers, first.body) == (second.status, second.headers, second.body), (first, second)
    assert through_litestar == (0 if taken else 1), (method, path, through_litestar)
    return first


def auth(client: ServerClientHandle, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.api_key}", **extra}


def as_json(body: Any) -> bytes:
    return json.dumps(body).encode()


JSON = {"Content-Type": "application/json"}
_TOKEN = "Elicitd-Subject-Token"


async def two_clients_two_flows(
    app: RunningApp, subject: Subject
) -> tuple[ServerClientHandle, ServerClientHandle, dict[str, Any], dict[str, Any]]:
    """A server client with a pending flow and a completed one (as created), and another client."""
    client, other = await new_server_client(app), await new_server_client(app)
    async with app.http(client.api_key) as http:
        pending = await create_external(http, subject)
        done = await create_external(http, subject, url="https://app.example.com/done")
        completed = await http.post(f"/v1/flows/{done['flow']['id']}/complete", json={"result": {"ok": True}})
        assert completed.status_code == 200
    return client, other, pending, done


async def test_status_reads_answer_as_litestar_does(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    client, other, created_pending, created_done = await two_clients_two_flows(elicitd, subject)
    pending, done = created_pending["flow"]["id"], created_done["flow"]["id"]
    key = auth(client)
    cases: list[tuple[str, bool, dict[str, str]]] = [
        (f"/v1/flows/{done}", True, key),
        (f"/v1/flows/{pending}", True, key),
        (f"/v1/flows/{done}?wait_seconds=5", True, key),
        (f"/v1/flows/{pending}?wait_seconds=0", True, key),
        (f"/v1/flows/{pending}?wait_seconds=0.2", True, key),  # parks, then answers pending
        (f"/v1/flows/{done}", True, auth(other)),  # another client's flow: 404
        (f"/v1/flows/{done}", True, {}),  # no key
        (f"/v1/flows/{done}", True, {"Authorization": "Bearer elk_nope"}),
        ("/v1/flows/fl_nothing", True, key),
        ("/v1/flows/fl_0123456789abcdef0123456789abcdef", True, key),
        # Litestar's to answer: its own query parsing and validation, its routing.
        (f"/v1/flows/{done}?wait_seconds=301", False, key),
        (f"/v1/flows/{done}?wait_seconds=-1", False, key),
        (f"/v1/flows/{done}?wait_seconds=abc", False, key),
        (f"/v1/flows/{done}?wait_seconds=1e1", False, key),
        (f"/v1/flows/{done}?wait_seconds=5&wait_seconds=6", False, key),
        (f"/v1/flows/{done}?other=1", False, key),
        (f"/v1/flows/{done}/", False, key),
        ("/v1/flows/not-a-flow", False, key),
    ]
    for path, taken, headers in cases:
        await both(elicitd, plain, routed, "GET", path, taken=taken, headers=headers)
    # A Host that is not the instance's is refused before either path (service.hosts), alike.
    for host in ("bad host", "rebind.example"):
        refused = await both(
            elicitd, plain, routed, "GET", f"/v1/flows/{done}", taken=True, headers={**key, "Host": host}
        )
        assert refused.status == 421
    # Other methods on the path are Litestar's.
    await both(elicitd, plain, routed, "POST", f"/v1/flows/{done}", taken=False, headers=key)
    await both(elicitd, plain, routed, "HEAD", f"/v1/flows/{done}", taken=False, headers=key)


async def test_status_long_poll_answers_the_completion_on_both(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    client = await new_server_client(elicitd)
    async with elicitd.http(client.api_key) as http:
        flows = [
            (await create_external(http, subject, url=f"https://app.example.com/{i}"))["flow"]["id"] for i in (1, 2)
        ]
        before = routed.get(id(elicitd.app), 0)
        waits = [
            asyncio.create_task(send(app, "GET", f"/v1/flows/{flow}?wait_seconds=20", headers=auth(client)))
            for app, flow in zip((elicitd, plain), flows, strict=True)
        ]
        await asyncio.sleep(0.3)
        assert not any(wait.done() for wait in waits)
    async with plain.http(client.api_key) as http:  # the completions go through the other instance
        for flow in flows:
            assert (await http.post(f"/v1/flows/{flow}/complete", json={"result": {"n": 1}})).status_code == 200
        hot, litestar = await asyncio.gather(*waits)
    assert routed.get(id(elicitd.app), 0) == before
    # The two flows differ in their URL only (a second flow alike would be the first, reused).
    assert hot.normalized("https://app.example.com/1") == litestar.normalized("https://app.example.com/2")
    assert json.loads(hot.body)["flow"]["status"] == "completed"


async def test_resolves_answer_as_litestar_does(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    client, other, pending, done = await two_clients_two_flows(elicitd, subject)
    key = auth(client, **JSON)
    accept_done = resolve_body(done, subject)
    accept_pending = resolve_body(pending, subject)
    elsewhere = Subject(iss=subject.iss, sub=subject.sub + "-other")
    deep: Any = {"x": 1}
    for _ in range(40):
        deep = {"x": deep}
    taken_cases: list[tuple[bytes, dict[str, str]]] = [
        (as_json(accept_done), key),
        (as_json(accept_pending), key),
        (as_json({**accept_pending, "wait_seconds": 0.2}), key),  # parks, then answers
        (as_json(resolve_body(done, subject, action=None)), key),
        (as_json({**accept_done, "subject": subject_json(elsewhere)}), key),  # not its subject
        (as_json({**accept_done, "request_state": accept_done["request_state"][:-4] + "AAAA"}), key),
        (as_json(accept_done), auth(other, **JSON)),  # another client's request state
        (as_json(accept_done), JSON),  # no key
        (as_json(accept_done), {"Authorization": "Bearer elk_nope", **JSON}),
        (as_json(accept_done), {**key, "Content-Type": "application/json; charset=utf-8"}),
        (as_json(accept_done), {**key, "Elicitd-Subject-Token": "ignored-for-this-client"}),
    ]
    for body, headers in taken_cases:
        await both(elicitd, plain, routed, "POST", "/v1/flows/resolve", taken=True, content=body, headers=headers)
    litestar_cases: list[tuple[bytes, dict[str, str]]] = [
        (b"", key),
        (b"{", key),
        (b"[]", key),
        (b"null", key),
        (as_json({**accept_done, "unknown": 1}), key),
        (as_json({k: v for k, v in accept_done.items() if k != "request_state"}), key),
        (as_json({**accept_done, "wait_seconds": 301}), key),
        (as_json({**accept_done, "wait_seconds": "5"}), key),  # Litestar's lax conversion takes it
        (as_json({**accept_done, "subject": {"iss": subject.iss}}), key),
        (as_json({**accept_done, "input_responses": {"k": {"action": "maybe"}}}), key),
        (as_json({**accept_done, "context": deep}), key),  # nested too deep
        (as_json(accept_done), {"Authorization": key["Authorization"], "Content-Type": "text/plain"}),
        (as_json(accept_done), {"Authorization": key["Authorization"]}),
        (as_json({**accept_done, "unknown": 1}), JSON),  # no key and a bad body: Litestar's order
        (b"{" * 40, key),
    ]
    for body, headers in litestar_cases:
        await both(elicitd, plain, routed, "POST", "/v1/flows/resolve", taken=False, content=body, headers=headers)
    for host in ("bad host", "rebind.example"):
        misdirected = {**key, "Host": host}
        refused = await both(
            elicitd,
            plain,
            routed,
            "POST",
            "/v1/flows/resolve",
            taken=True,
            content=as_json(accept_done),
            headers=misdirected,
        )
        assert refused.status == 421
    twice = [("Authorization", key["Authorization"]), ("Content-Type", "application/json")]
    twice += [("Elicitd-Subject-Token", "a"), ("Elicitd-Subject-Token", "b")]
    await both(
        elicitd, plain, routed, "POST", "/v1/flows/resolve", taken=False, content=as_json(accept_done), headers=twice
    )
    # Over the body limit, announced or streamed: Litestar's 413.
    big = as_json({**accept_done, "pad": "x" * (elicitd.settings.max_body_bytes + 10)})
    await both(elicitd, plain, routed, "POST", "/v1/flows/resolve", taken=False, content=big, headers=key)

    async def streamed() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    for app in (elicitd, plain):
        assert (await send(app, "POST", "/v1/flows/resolve", content=streamed(), headers=key)).status == 413
    # A body in several messages (chunked, within the limit) is taken whole.
    good = as_json(accept_done)

    async def in_pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(good), 16):
            yield good[start : start + 16]

    before = routed.get(id(elicitd.app), 0)
    pieces = await send(elicitd, "POST", "/v1/flows/resolve", content=in_pieces(), headers=key)
    assert routed.get(id(elicitd.app), 0) == before
    whole = await send(plain, "POST", "/v1/flows/resolve", content=good, headers=key)
    assert (pieces.status, pieces.body) == (whole.status, whole.body)
    # Other paths and methods stay Litestar's.
    await both(elicitd, plain, routed, "POST", "/v1/flows/resolve/", taken=False, content=good, headers=key)
    await both(elicitd, plain, routed, "GET", "/v1/flows/resolve", taken=False, headers=key)
    await both(elicitd, plain, routed, "PUT", "/v1/flows/resolve", taken=False, content=good, headers=key)


async def test_a_decline_moves_the_flow_and_answers_alike(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    """A resolve that changes the flow: one flow per instance, made alike; the answers are the same
    but for the ids and times, and both flows end declined."""
    client = await new_server_client(elicitd)
    async with elicitd.http(client.api_key) as http:
        made = [await create_external(http, subject, url=f"https://app.example.com/decline/{i}") for i in (1, 2)]
    assert made[0]["flow"]["id"] != made[1]["flow"]["id"]
    before = routed.get(id(elicitd.app), 0)
    answers = [
        await send(
            app,
            "POST",
            "/v1/flows/resolve",
            json=resolve_body(created, subject, action="decline"),
            headers=auth(client),
        )
        for app, created in zip((elicitd, plain), made, strict=True)
    ]
    assert routed.get(id(elicitd.app), 0) == before
    hot, litestar = (
        answer.normalized(f"https://app.example.com/decline/{i}") for i, answer in ((1, answers[0]), (2, answers[1]))
    )
    assert hot == litestar
    assert [json.loads(a.body)["flow"]["status"] for a in answers] == ["declined", "declined"]


async def test_a_client_that_must_prove_the_subject_is_refused_alike(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    proving = await new_server_client(elicitd, subject_proof="required", resource_uris=["https://mcp.example.com/mcp"])
    loose = await new_server_client(elicitd)
    async with elicitd.http(loose.api_key) as http:
        created = await create_external(http, subject)
    body = as_json(resolve_body(created, subject))
    for headers in (auth(proving, **JSON), auth(proving, **JSON, **{"Elicitd-Subject-Token": "not-a-jwt"})):
        answer = await both(
            elicitd, plain, routed, "POST", "/v1/flows/resolve", taken=True, content=body, headers=headers
        )
        assert answer.status in (401, 403), answer


async def test_a_client_that_must_prove_the_subject_reads_status_alike(
    elicitd: RunningApp, plain: RunningApp, routed: dict[int, int], subject: Subject
) -> None:
    """Its key alone reads the summary (no subject, page or result) on both paths; a token that
    proves nothing is refused alike; two tokens are Litestar's to read."""
    proving = await new_server_client(elicitd)
    async with elicitd.http(proving.api_key) as http:
        created = await create_external(http, subject)
        flow = created["flow"]["id"]
        assert (await http.post(f"/v1/flows/{flow}/complete", json={"result": {"ok": True}})).status_code == 200
    async with elicitd.state.sessions() as session:  # the flow made first, then the policy
        await session.execute(
            text("UPDATE server_clients SET subject_proof = 'required', resource_uris = :uris WHERE id = :id"),
            {"uris": ["https://mcp.example.com/mcp"], "id": proving.id},
        )
        await session.commit()
    key = auth(proving)
    alone = await both(elicitd, plain, routed, "GET", f"/v1/flows/{flow}", taken=True, headers=key)
    waited = await both(elicitd, plain, routed, "GET", f"/v1/flows/{flow}?wait_seconds=5", taken=True, headers=key)
    assert alone.status == waited.status == 200
    assert json.loads(alone.body) == json.loads(waited.body)
    assert sorted(json.loads(alone.body)) == ["flow"]
    assert sorted(json.loads(alone.body)["flow"]) == [
        "completed_at",
        "created_at",
        "expires_at",
        "id",
        "kind",
        "status",
    ]
    refused = await both(
        elicitd, plain, routed, "GET", f"/v1/flows/{flow}", taken=True, headers=auth(proving, **{_TOKEN: "not-a-jwt"})
    )
    # The subject's issuer (id.example.com) is none elicitd knows, whatever the token.
    assert (refused.status, json.loads(refused.body)["reason"]) == (403, "unknown_issuer")
    twice = [("Authorization", key["Authorization"]), (_TOKEN, "a"), (_TOKEN, "b")]
    await both(elicitd, plain, routed, "GET", f"/v1/flows/{flow}", taken=False, headers=twice)


async def test_the_request_line_is_the_same_on_both_paths(
    elicitd: RunningApp, plain: RunningApp, subject: Subject
) -> None:
    """The observer's line for a hot request names the route's template, the flow and the
    outcome as it does for the same request through Litestar."""
    client = await new_server_client(elicitd)
    async with elicitd.http(client.api_key) as http:
        created = await create_external(http, subject)
    flow = created["flow"]["id"]
    lines: dict[str, list[dict[str, Any]]] = {}
    for name, app in (("hot", elicitd), ("plain", plain)):
        capture = LogCapture()
        requests = logging.getLogger("elicitd.requests")
        requests.addHandler(capture)
        level = requests.level
        requests.setLevel(logging.INFO)
        try:
            async with app.http(client.api_key) as http:
                assert (await http.get(f"/v1/flows/{flow}")).status_code == 200
                assert (await http.post("/v1/flows/resolve", json=resolve_body(created, subject))).status_code == 200
                assert (await http.get("/v1/flows/fl_nothing")).status_code == 404
        finally:
            requests.removeHandler(capture)
            requests.setLevel(level)
        lines[name] = [json.loads(line) for line in capture.lines]
    for line in lines["hot"] + lines["plain"]:
        line.pop("ts")
        assert line.pop("duration_ms") > 0
    assert lines["hot"] == lines["plain"]
    template = plain.app.asgi_router.handle_routing(path=f"/v1/flows/{flow}", method="GET")[4]
    assert [(line["route"], line["status"]) for line in lines["hot"]] == [
        (template, 200),
        ("/v1/flows/resolve", 200),
        (template, 404),
    ]
    assert lines["hot"][0]["flow_id"] == lines["hot"][1]["flow_id"] == flow


def test_the_setting_is_read_from_the_environment(make_settings: Callable[..., Settings]) -> None:
    base = {"ELICITD_DATABASE_URL": "postgresql://x@127.0.0.1/db", "ELICITD_PUBLIC_URL": "https://e.example.com"}
    base["ELICITD_KEYS"] = "k1:" + "A" * 43 + "="
    assert Settings.from_env(base).hot_routes is True
    assert Settings.from_env(base | {"ELICITD_HOT_ROUTES": "false"}).hot_routes is False
    with pytest.raises(ConfigurationError, match="ELICITD_HOT_ROUTES"):
        Settings.from_env(base | {"ELICITD_HOT_ROUTES": "sometimes"})


def test_building_the_app_fails_if_the_routes_get_what_the_layer_would_skip(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = build_services(make_settings())
    app = create_app(services)  # builds: nothing to skip today
    # Admission control is outermost (service.admission), then the observer.
    assert isinstance(app.asgi_handler, Admission)
    observer = app.asgi_handler._app
    assert isinstance(observer, RequestObserver)
    # The Host check sits between the observer and both paths (service.hosts).
    assert isinstance(observer.app, HostCheck)
    assert isinstance(observer.app._app, HotFlowRoutes)
    handler = observer.app._app._app

    async def hook(*_: Any) -> None:
        return None

    app.after_exception = [hook]
    with pytest.raises(RuntimeError, match="after_exception"):
        HotFlowRoutes(handler, app, services)
    app.after_exception = []

    def guarded(self: HTTPRouteHandler) -> list[Any]:
        return [hook]

    monkeypatch.setattr(HTTPRouteHandler, "resolve_guards", guarded)
    with pytest.raises(RuntimeError, match="POST /v1/flows/resolve has guards"):
        create_app(services)
    # Without the layer, Litestar serves the routes with whatever they have.
    plain = create_app(build_services(make_settings(hot_routes=False, max_in_flight=0))).asgi_handler
    assert isinstance(plain, RequestObserver)
    assert isinstance(plain.app, HostCheck)
    assert not isinstance(plain.app._app, HotFlowRoutes)
