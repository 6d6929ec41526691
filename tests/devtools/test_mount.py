"""When the dev tools run (only ``elicitd dev`` on embedded backends on loopback), what they add to
the database, which requests they take, and that nothing else ever imports them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from service.connections.models import Provider
from service.devtools.keys import DevSecrets
from service.devtools.mount import DevTools, DevToolsOff, prepare_dev_tools, refusal
from service.identity.clients import create_server_client
from service.identity.models import Issuer, ServerClient
from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp
from tests.support.docs import ROOT


def dev_settings(**env: str) -> Settings:
    values = {
        "ELICITD_DEV": "true",
        "ELICITD_DATABASE_URL": "postgresql://postgres@/elicitd?host=/tmp/nowhere",
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
    }
    values.update(env)
    return Settings.from_env(values)


def test_they_run_only_in_dev_mode_on_embedded_backends_on_loopback() -> None:
    assert refusal(dev_settings(), host="127.0.0.1", embedded=True) is None
    assert refusal(dev_settings(ELICITD_PUBLIC_URL="http://localhost:8000"), host="::1", embedded=True) is None
    assert refusal(dev_settings(), host="127.0.0.1", embedded=False) == (
        "this instance uses a configured database or Redis, not the embedded ones"
    )
    assert refusal(dev_settings(), host="0.0.0.0", embedded=True) == (  # noqa: S104 - the case refused
        "this instance listens on 0.0.0.0, not on loopback"
    )
    public = dev_settings(ELICITD_PUBLIC_URL="https://elicitd.example.com")
    assert refusal(public, host="127.0.0.1", embedded=True) == "ELICITD_PUBLIC_URL is not a loopback address"
    production = dev_settings(ELICITD_DEV="false")
    assert refusal(production, host="127.0.0.1", embedded=True) == "ELICITD_DEV is off"


def test_refused_they_leave_the_app_alone_and_the_banner_says_why(tmp_path: Path) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    off = prepare_dev_tools(dev_settings(), data_dir=tmp_path, host="127.0.0.1", embedded=False)
    assert isinstance(off, DevToolsOff)
    assert off.wrap(app) is app
    assert off.banner("elk_x") == (
        "Dev ID and Demo Files are off: this instance uses a configured database or Redis, not the embedded ones.\n"
    )
    assert list(tmp_path.iterdir()) == []  # no keys made, nothing registered (the database is not there)


async def test_wrapped_they_take_only_their_paths(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["type"], scope.get("path", "")))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    tools = DevTools.build("http://127.0.0.1:8000", DevSecrets.load_or_create(tmp_path))
    transport = httpx.ASGITransport(app=tools.wrap(app))  # type: ignore[arg-type]  # litestar's ASGI types are narrower
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        assert (await http.get("/dev/id/jwks")).status_code == 200
        assert (await http.get("/.well-known/oauth-authorization-server/dev/files")).status_code == 200
        assert (await http.get("/dev/files/api/files")).status_code == 401
        assert (await http.get("/devices")).status_code == 204
        assert (await http.get("/.well-known/jwks.json")).status_code == 204
        assert (await http.get("/f/fl_1")).status_code == 204
    assert seen == [("http", "/devices"), ("http", "/.well-known/jwks.json"), ("http", "/f/fl_1")]


def test_their_keys_are_made_once_and_kept_private(tmp_path: Path) -> None:
    first = DevSecrets.load_or_create(tmp_path)
    assert (tmp_path / "dev-tools.json").stat().st_mode & 0o777 == 0o600
    again = DevSecrets.load_or_create(tmp_path)
    assert (again.kid, again.files_client_secret) == (first.kid, first.files_client_secret)
    assert repr(first) == "DevSecrets()"


async def test_registering_trusts_dev_id_offers_demo_files_and_is_idempotent(
    tmp_path: Path, make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings(public_url="http://127.0.0.1:8123")
    tools = DevTools.build(settings.public_url, DevSecrets.load_or_create(tmp_path))
    async with elicitd.state.sessions() as session:
        dev = (await session.execute(select(ServerClient).where(ServerClient.name == "dev"))).scalar_one_or_none()
        if dev is None:
            await create_server_client(session, "dev", trusted_issuers=["https://id.example.com"], subject_proof="none")
        await session.commit()
    await tools.register(settings)
    await tools.register(settings)
    async with elicitd.state.sessions() as session:
        issuer = (
            await session.execute(select(Issuer).where(Issuer.issuer == "http://127.0.0.1:8123/dev/id"))
        ).scalar_one()
        provider = (await session.execute(select(Provider).where(Provider.name == "demo-files"))).scalar_one()
        dev = (await session.execute(select(ServerClient).where(ServerClient.name == "dev"))).scalar_one()
    assert (issuer.display_name, issuer.client_id, issuer.enabled) == ("Dev ID", "elicitd", True)
    assert issuer.client_secret_enc is not None
    assert (provider.display_name, provider.issuer, provider.default_scopes) == (
        "Demo Files",
        "http://127.0.0.1:8123/dev/files",
        ["files:read"],
    )
    # A dev client that lists its trusted issuers gets Dev ID added, once; an empty list means all.
    assert dev.trusted_issuers.count("http://127.0.0.1:8123/dev/id") == 1
    assert dev.allowed_providers == []


def test_nothing_but_the_dev_command_imports_them() -> None:
    code = (
        "import sys, service.app, service.services, service.cli\n"
        "service.cli.build_parser()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('service.devtools'))\n"
        "assert not loaded, loaded\n"
        "assert 'service.app' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


async def test_they_leave_the_logging_elicitd_configured_as_it_was() -> None:
    """Litestar's default logging config would replace the root handler when the dev tools' app
    starts: every line after that (request lines included) printed without its fields."""
    import io
    import logging

    from litestar.testing import AsyncTestClient

    from service.logs import configure_logging, log_fields

    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        configure_logging(dev_settings(ELICITD_LOG_JSON="false"), stream=stream)
        installed = root.handlers[:]
        tools = DevTools.build("http://127.0.0.1:8000", DevSecrets.generate())
        async with AsyncTestClient(app=tools.app) as client:
            assert (await client.get("/dev/id/.well-known/openid-configuration")).status_code == 200
        assert root.handlers == installed
        log_fields(
            logging.getLogger("elicitd.requests"), logging.INFO, "request", {"route": "/v1/flows", "status": 201}
        )
        assert (
            stream.getvalue().splitlines()[-1].endswith("info    elicitd.requests: request route=/v1/flows status=201")
        )
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
