"""``create_app(settings)``: wires the domains into one Litestar application."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from litestar import Litestar
from litestar.contrib.jinja import JinjaTemplateEngine
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from service.admin.operations import ADMIN_SECURITY_SCHEME, Operations
from service.apikeys.wiring import install as install_apikeys
from service.connections.api import ConnectionController
from service.connections.discovery import MetadataCache
from service.connections.kind import OAuthConnectKind
from service.connections.pages import ROUTES as CONNECT_ROUTES
from service.connections.pages import connect_page
from service.connections.repository import purge_states as purge_oauth_states
from service.connections.service import ConnectionService
from service.consent.wiring import install as install_consent
from service.crypto.vault import Vault
from service.db.engine import make_engine, make_read_sessionmaker, make_sessionmaker
from service.errors import EXCEPTION_HANDLERS
from service.flows.api import FlowController
from service.flows.kinds import default_handlers
from service.flows.pages import open_flow
from service.flows.request_state import RequestStateCodec
from service.flows.service import FlowService
from service.flows.sweeper import run_sweeper
from service.health import healthz, readyz
from service.identity.issuers import IssuerDirectory
from service.identity.keys import ApiKeyAuthenticator
from service.identity.login_api import IDENTITY_ROUTES
from service.identity.sessions import purge_expired as purge_expired_logins
from service.payments.wiring import install as install_payments
from service.settings import Settings
from service.signals.bus import WaiterHub

_HERE = Path(__file__).parent


def create_app(settings: Settings) -> Litestar:
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    flows_ref: list[FlowService] = []

    async def finished(ids: list) -> list:  # type: ignore[type-arg]
        return await flows_ref[0].finished_among(ids)

    hub = WaiterHub(
        redis_url=settings.redis_url,
        channel=settings.redis_channel,
        poll_interval=settings.poll_interval_seconds,
        safety_poll_interval=max(settings.poll_interval_seconds * 10, 30.0),
        finished=finished,
    )
    flows = FlowService(
        settings=settings,
        sessions=sessions,
        hub=hub,
        codec=RequestStateCodec(settings.keys),
        handlers=default_handlers(),
        read_sessions=make_read_sessionmaker(engine),
    )
    flows_ref.append(flows)
    state = State(
        {
            "settings": settings,
            "engine": engine,
            "sessions": sessions,
            "hub": hub,
            "flows": flows,
            "authenticator": ApiKeyAuthenticator(sessions, settings.api_key_cache_seconds),
            "kind_pages": {},
            "vault": Vault(settings.keys),
            "issuers": IssuerDirectory(sessions, Vault(settings.keys)),
        }
    )
    state.connections = ConnectionService(sessions=sessions, vault=state.vault, metadata=MetadataCache())
    flows.handlers["oauth_connect"] = OAuthConnectKind()
    state.kind_pages["oauth_connect"] = connect_page
    ops = Operations.install(settings, state)

    kind_routes = [
        *install_consent(state, flows, settings),
        *install_payments(state, flows, settings),
        *install_apikeys(state, flows, settings),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if settings.config_file:
            from service.config_file import apply_config_file

            await apply_config_file(settings.config_file, sessions, state.vault)
        await hub.start()
        tasks = []
        if settings.background_tasks:
            chores = [purge_expired_logins, purge_oauth_states]
            tasks.append(asyncio.create_task(run_sweeper(flows, settings.sweep_interval_seconds, chores)))
            tasks.extend(ops.start())
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await hub.stop()
            ops.shutdown()
            await state.issuers.close()
            await engine.dispose()

    app = Litestar(
        route_handlers=[
            *ops.route_handlers(),
            FlowController,
            open_flow,
            healthz,
            readyz,
            *kind_routes,
            *IDENTITY_ROUTES,
            ConnectionController,
            *CONNECT_ROUTES,
            create_static_files_router(path="/static", directories=[_HERE / "static"], include_in_schema=False),
        ],
        state=state,
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
        template_config=TemplateConfig(directory=_HERE / "templates", engine=JinjaTemplateEngine),
        openapi_config=OpenAPIConfig(
            title="elicitd",
            version="0.1.0",
            description="Durable state for MCP URL-mode elicitation.",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
            components=Components(
                security_schemes={
                    "apiKey": SecurityScheme(type="http", scheme="bearer", description="A server client's API key"),
                    "adminToken": ADMIN_SECURITY_SCHEME,
                }
            ),
        ),
        debug=False,
        logging_config=None,
    )
    return ops.wrap(app)
