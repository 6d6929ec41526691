"""``create_app(services)``: maps the routes onto the services ``build_services`` made.

Nothing here builds a service or reads configuration beyond what routing needs. Handlers get
the typed ``services`` dependency and take the parts they need from it; none reads ``app.state``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from litestar import Litestar, Router
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins.core import MsgspecDIPlugin
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from service.admin.api import admin_router
from service.admin.deps import AdminServices
from service.admission import Admission
from service.api_docs import OfflineSwaggerRenderPlugin
from service.branding.routes import BRAND_ROUTES
from service.connections.api import ConnectionController
from service.connections.deps import ConnectionApiServices
from service.console.deps import ConsoleServices
from service.console.router import check_console_routes, console_router
from service.domains import display_origin
from service.events.api import EventController
from service.events.deps import EventServices
from service.flows.api import FlowController
from service.flows.deps import FlowApiServices, FlowPageServices, HotFlowServices
from service.flows.hot import HotFlowRoutes
from service.flows.pages import open_flow
from service.flows.plugins import MountedKind
from service.grants.deps import GrantPageServices
from service.grants.pages import ROUTES as GRANT_ROUTES
from service.health import ReadinessServices, healthz, readyz
from service.hosts import HostCheck, allowed_names
from service.i18n import BY_TAG, LocaleScope
from service.identity.deps import AuthenticatorServices
from service.limits import LimitedRequest
from service.oauth.api import OAUTH_ROUTES
from service.oauth.deps import ExchangeServices
from service.observability.metrics import MetricsServices, metrics_endpoint
from service.observability.requests import RequestObserver
from service.openapi import AllowHeaderMiddleware, DescribedJsonRenderPlugin
from service.problems import EXCEPTION_HANDLERS, is_browser_path
from service.responses import JsonResponse
from service.services import Services
from service.serving import freeze_startup_heap
from service.signin.deps import SigninServices
from service.signin.routes import IDENTITY_ROUTES
from service.templating import LazyJinjaEngine

if TYPE_CHECKING:
    from litestar.plugins import PluginProtocol
    from litestar.types import ASGIApp

_HERE = Path(__file__).parent

ADMIN_SECURITY_SCHEME = SecurityScheme(
    type="http", scheme="bearer", description="An admin token (eat_…), made with `elicitd admin tokens create`"
)


class ElicitdApp(Litestar):
    """Litestar with msgspec as its only model library.

    Litestar adds its pydantic and attrs plugins to every app whenever those libraries are
    installed, importing them to find out (7.7 and 0.8 MB of RSS, 134 ms). elicitd's schemas are
    msgspec ``Struct``s; the production image installs neither library, and a test environment
    that has them (through test tools) must not serve a different app.
    """

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


def _provide_services(services: Services) -> Provide:
    """The ``services`` dependency: the container, which each domain's handlers read through their
    own ``deps`` Protocol (what they use, and nothing else). Litestar hands it over unchecked, so
    the assignment below is where mypy checks that the container offers every domain all it reads.
    A kind's routes receive the kind's own services instead (``_kind_router``)."""
    admin: AdminServices = services
    authenticator: AuthenticatorServices = services
    connection_api: ConnectionApiServices = services
    console: ConsoleServices = services
    event: EventServices = services
    exchange: ExchangeServices = services
    flow_api: FlowApiServices = services
    flow_page: FlowPageServices = services
    grant_page: GrantPageServices = services
    hot_flow: HotFlowServices = services
    metrics: MetricsServices = services
    readiness: ReadinessServices = services
    signin: SigninServices = services
    del (
        admin,
        authenticator,
        connection_api,
        console,
        event,
        exchange,
        flow_api,
        flow_page,
        grant_page,
        hot_flow,
        metrics,
        readiness,
        signin,
    )

    async def provide() -> Services:
        return services

    return Provide(provide, use_cache=True)


def _provide(value: object) -> Provide:
    async def provide() -> object:
        return value

    return Provide(provide, use_cache=True)


def _kind_router(kind: MountedKind) -> Router:
    """A kind's routes, whose ``services`` is what the kind's own factory built (its plugin's return
    annotation is where mypy checks it against the kind's ``deps`` Protocol), not the container."""
    return Router(path="/", route_handlers=list(kind.plugin.routes), dependencies={"services": _provide(kind.services)})


def create_app(services: Services) -> Litestar:
    settings = services.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if settings.config_file:
            from service.config_file import apply_config_file

            await apply_config_file(settings.config_file, services.sessions, services.vault)
        await services.start()
        freeze_startup_heap()
        try:
            async with services.upkeep() if settings.background_tasks else contextlib.nullcontext():
                yield
        finally:
            await services.aclose()

    # Every page names the full elicitd origin, so a person can check where they are.
    # A non-ASCII host is shown in its Unicode form with its ASCII (punycode) form beside it.
    pages = LazyJinjaEngine(_HERE / "templates", page_globals={"domain": display_origin(settings.public_origin)})
    kind_routes = [_kind_router(kind) for kind in services.kinds.values() if kind.plugin.routes]
    app = ElicitdApp(
        route_handlers=[
            admin_router(services.sessions),
            console_router(services.console, services.sessions),
            metrics_endpoint,
            FlowController,
            EventController,
            open_flow,
            healthz,
            readyz,
            *kind_routes,
            *GRANT_ROUTES,
            *BRAND_ROUTES,
            *IDENTITY_ROUTES,
            ConnectionController,
            *OAUTH_ROUTES,
            create_static_files_router(path="/static", directories=[_HERE / "static"], include_in_schema=False),
        ],
        dependencies={"services": _provide_services(services)},
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[AllowHeaderMiddleware],
        request_max_body_size=settings.max_body_bytes,
        # JSON bodies: Content-Type and nesting checked before decoding (service/limits.py).
        request_class=LimitedRequest,
        # Returned data answered without Litestar's header machinery when it is plain JSON.
        response_class=JsonResponse,
        template_config=TemplateConfig(instance=pages),
        openapi_config=OpenAPIConfig(
            title="elicitd",
            version="0.1.0",
            description="Durable state for MCP URL-mode elicitation.",
            path="/schema",
            render_plugins=[OfflineSwaggerRenderPlugin("/schema"), DescribedJsonRenderPlugin()],
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
    check_console_routes(app)
    # Every browser page (error pages too) speaks the language chosen here (service/i18n.py).
    app.asgi_handler = LocaleScope(
        app.asgi_handler,
        default=BY_TAG.get(settings.default_locale.lower(), BY_TAG["en"]),
        secure=settings.secure_cookies,
        pages=lambda path: path == "/" or is_browser_path(path),
    )
    handler: ASGIApp = app.asgi_handler
    if settings.hot_routes:
        # Ordinary status reads and resolves are answered without Litestar's per-request work.
        handler = HotFlowRoutes(handler, app, services)
    # A request for another host name (DNS rebinding) reaches neither path; the observer counts it.
    handler = HostCheck(handler, allowed_names(settings.public_url, settings.allowed_hosts))
    # Observe every request, routed or not.
    handler = RequestObserver(handler, metrics=services.metrics, tracing=services.tracing)
    if settings.max_in_flight:
        # Outermost: past the bound a short request is refused before any work, its log line and
        # span included (it is counted in ``elicitd_overloaded``), so refusing costs far less than
        # answering. A long-poll that parks frees its slot (``service.admission.parked``).
        handler = Admission(handler, settings.max_in_flight, services.metrics.overloaded.inc)
    app.asgi_handler = handler
    return app
