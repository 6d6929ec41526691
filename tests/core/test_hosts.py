"""The ``Host`` allow-list (``service.hosts``): a request addressed to another name, as a DNS
rebinding page's is, gets ``421 misdirected_request`` from every route, the hot routes' and
Litestar's, and from the dev tools; the names an instance is reached by are answered as before."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from service.devtools.keys import DevSecrets
from service.devtools.mount import DevTools
from service.errors import ConfigurationError
from service.flows.schemas import Subject
from service.hosts import HostCheck, allowed_names, host_name
from service.settings import Settings
from tests.flows.helpers import create_external, external_body, resolve_body
from tests.support.apps import RunningApp, free_port, new_server_client, running_app

REBINDING = "rebind.example"
MISDIRECTED = {
    "type": "https://elicitd.dev/problems/misdirected_request",
    "title": "Misdirected Request",
    "status": 421,
    "code": "misdirected_request",
    "detail": "This server does not answer for the host name this request was sent to.",
}


def test_host_names_are_read_strictly() -> None:
    assert [
        host_name(value)
        for value in (
            b"Elicitd.Example.COM",
            b"elicitd.example.com.:8443",
            b"127.0.0.1:8000",
            b"[::1]:8000",
            b"[0:0::1]",
            b"elicitd.example.com:",
            b"elicitd.example.com:abc",
            b"elicitd.example.com:123456",
            b"[::1",
            b"[nothing]",
            b"",
            b"\xc3\xa9.example",
        )
    ] == [
        "elicitd.example.com",
        "elicitd.example.com",
        "127.0.0.1",
        "::1",
        "::1",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ]


def test_the_allow_list_is_the_public_host_loopback_and_the_extra_names() -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    check = HostCheck(inner, allowed_names("https://Elicitd.Example.com/base", ("elicitd.ns.svc", "10.0.0.7")))
    admitted = {
        value: check.admits(value)
        for value in (
            b"elicitd.example.com",
            b"ELICITD.example.com:443",
            b"elicitd.ns.svc:8000",
            b"10.0.0.7:8000",
            b"localhost:8000",
            b"127.0.0.1",
            b"127.8.9.10:8000",
            b"[::1]:8000",
            b"rebind.example",
            b"elicitd.example.com.rebind.example",
            b"10.0.0.8:8000",
            b"127.1",
            b"bad host",
        )
    }
    assert [value for value, ok in admitted.items() if ok] == [
        b"elicitd.example.com",
        b"ELICITD.example.com:443",
        b"elicitd.ns.svc:8000",
        b"10.0.0.7:8000",
        b"localhost:8000",
        b"127.0.0.1",
        b"127.8.9.10:8000",
        b"[::1]:8000",
    ]


async def refused_everywhere(app: RunningApp, host: str) -> None:
    """Every kind of route answers ``host`` 421, and nothing is done: no flow is made or resolved."""
    client = await new_server_client(app)
    subject = Subject(iss="https://id.example.com", sub=f"u-{uuid.uuid4().hex[:8]}")
    async with app.http(client.api_key) as http:
        created = await create_external(http, subject)
        flow = created["flow"]["id"]
        body = resolve_body(created, subject, action="decline")
        requests: list[tuple[str, str, dict[str, Any]]] = [
            ("GET", "/healthz", {}),
            ("GET", "/readyz", {}),
            ("GET", f"/v1/flows/{flow}", {}),  # a hot route
            ("POST", "/v1/flows/resolve", {"json": body}),  # a hot route
            ("GET", f"/v1/flows/{flow}?wait_seconds=1&x=1", {}),  # Litestar's
            ("POST", "/v1/flows", {"json": external_body(subject, url="https://app.example.com/other")}),
            ("GET", f"/f/{flow}", {}),
            ("GET", "/schema/openapi.json", {}),
            ("POST", "/oauth/token", {"data": {"grant_type": "client_credentials"}}),
        ]
        answers = [
            await http.request(method, path, headers={"Host": host}, **options) for method, path, options in requests
        ]
        assert [a.status_code for a in answers] == [421] * len(requests), [
            (r[1], a.text) for r, a in zip(requests, answers, strict=True)
        ]
        for answer in answers:
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json() == MISDIRECTED
        # The resolve was never applied: the flow is still pending, and it answers its own host.
        status = await http.get(f"/v1/flows/{flow}")
    assert (status.status_code, status.json()["flow"]["status"]) == (200, "pending")
    async with app.state.sessions() as session:
        count = await session.execute(text("SELECT count(*) FROM flows WHERE server_client_id = :c"), {"c": client.id})
    assert count.scalar_one() == 1


@pytest.mark.parametrize("hot_routes", [True, False], ids=["hot-routes", "litestar-only"])
async def test_a_rebinding_host_is_refused_on_every_route(
    make_settings: Callable[..., Settings], hot_routes: bool
) -> None:
    async with running_app(make_settings(hot_routes=hot_routes)) as app:
        port = app.url.rsplit(":", 1)[1]
        await refused_everywhere(app, f"{REBINDING}:{port}")
        await refused_everywhere(app, f"127.0.0.1.{REBINDING}:{port}")
        async with httpx.AsyncClient(base_url=app.url) as http:
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", f"LOCALHOST.:{port}"):
                answer = await http.get("/healthz", headers={"Host": host})
                assert answer.status_code == 200, (host, answer.text)


async def test_a_public_name_and_the_extra_names_are_answered_and_no_other(
    make_settings: Callable[..., Settings],
) -> None:
    """Behind a proxy or in a cluster: the public URL's name (any port), the names of
    ``ELICITD_ALLOWED_HOSTS`` (a service name, a pod IP), and loopback; another pod's IP is not."""
    settings = make_settings(
        public_url="https://elicitd.example.com", allowed_hosts=("elicitd.elicitd.svc", "10.1.2.3")
    )
    async with running_app(settings, keep_public_url=True) as app, httpx.AsyncClient(base_url=app.url) as http:
        statuses = {
            host: (await http.get("/healthz", headers={"Host": host})).status_code
            for host in (
                "elicitd.example.com",
                "elicitd.example.com:443",
                "elicitd.elicitd.svc:8000",
                "10.1.2.3:8000",
                "127.0.0.1:8000",
                "10.1.2.4:8000",
                "elicitd.elicitd",
                "example.com",
            )
        }
    assert statuses == {
        "elicitd.example.com": 200,
        "elicitd.example.com:443": 200,
        "elicitd.elicitd.svc:8000": 200,
        "10.1.2.3:8000": 200,
        "127.0.0.1:8000": 200,
        "10.1.2.4:8000": 421,
        "elicitd.elicitd": 421,
        "example.com": 421,
    }


async def test_the_dev_tools_refuse_a_rebinding_host(tmp_path: Path) -> None:
    """``POST /dev/id/mint`` hands out any user's access token: a rebinding page must not reach it."""

    async def elicitd(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the dev tools' paths never reach elicitd")

    port = free_port()
    tools = DevTools.build(f"http://127.0.0.1:{port}", DevSecrets.load_or_create(tmp_path))
    transport = httpx.ASGITransport(app=tools.wrap(elicitd))  # type: ignore[arg-type]  # litestar's ASGI types are narrower
    mint = {"sub": "alice", "audience": "http://127.0.0.1:9000/mcp"}
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as http:
        rebound = await http.post("/dev/id/mint", json=mint, headers={"Host": f"{REBINDING}:{port}"})
        files = await http.get("/dev/files/api/files", headers={"Host": f"{REBINDING}:{port}"})
        own = await http.post("/dev/id/mint", json=mint)
    assert (rebound.status_code, rebound.json()) == (421, MISDIRECTED)
    assert "access_token" not in rebound.text
    assert (files.status_code, files.json()["code"]) == (421, "misdirected_request")
    assert own.status_code == 200
    assert own.json()["access_token"].count(".") == 2


def test_allowed_hosts_are_read_from_the_environment() -> None:
    env = {
        "ELICITD_DATABASE_URL": "postgresql://elicitd@127.0.0.1/elicitd",
        "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
        "ELICITD_KEYS": "k1:" + "A" * 43,
    }
    assert Settings.from_env(env).allowed_hosts == ()
    parsed = Settings.from_env({**env, "ELICITD_ALLOWED_HOSTS": "Elicitd.NS.svc, 10.0.0.7,,[FE80::1],probe."})
    assert parsed.allowed_hosts == ("elicitd.ns.svc", "10.0.0.7", "fe80::1", "probe")
    for bad in ("https://elicitd.ns.svc", "elicitd.ns.svc:8000", "*.example.com", "a b", "x/y", "[x]"):
        with pytest.raises(ConfigurationError, match="ELICITD_ALLOWED_HOSTS"):
            Settings.from_env({**env, "ELICITD_ALLOWED_HOSTS": bad})
