"""The console's router at ``/console``: every ``service/console/pages_<area>.py`` module's
``ROUTES``, found by name (no shared list to edit), behind the console's guard, CSRF check and
audit row, with its own error pages.

A page module exposes ``ROUTES`` (Litestar route handlers, paths relative to ``/console``) and,
to appear in the navigation, ``NAV = (order, "/console/<area>", N_("Label"))``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

from litestar import Litestar, Request, Response, Router
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.routes import HTTPRoute
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

import service.console
from service.admin.guards import AdminAuditMiddleware
from service.console.audit import console_row, mirrored
from service.console.guard import (
    ConsoleGuard,
    ReauthenticationRequired,
    SignInRequired,
    fresh_login_path,
    provide_operator,
    signin_path,
)
from service.console.render import CONSOLE_HEADERS, NavEntry, render, set_navigation
from service.console.signin import ConsoleSignIn
from service.console.signin_routes import SIGNIN_ROUTES
from service.errors import ElicitdError
from service.i18n import N_, _
from service.problems import handle_elicitd_error, handle_http_exception

PREFIX = "/console"
_PAGE_MODULE = "pages_"


def page_modules() -> list[ModuleType]:
    """Every ``service.console.pages_*`` module, imported, by name."""
    names = sorted(
        info.name for info in pkgutil.iter_modules(service.console.__path__) if info.name.startswith(_PAGE_MODULE)
    )
    return [importlib.import_module(f"service.console.{name}") for name in names]


def _redirect(location: str) -> Response[Any]:
    return Response(content=b"", status_code=303, headers={"Location": location, **CONSOLE_HEADERS})


def _error_page(request: Request[Any, Any, Any], status: int, title: str, detail: str, **extra: Any) -> Response[Any]:
    """The console's error page: the title and detail in the page's language where the catalogue
    has them (every error a console route raises is marked for it), else as written."""
    if "link_text" in extra:
        extra["link_text"] = _(extra["link_text"])
    return render(
        request, "console/error.html", status=status, title=_(title), detail=_(detail) if detail else "", **extra
    )


def _console_error(request: Request[Any, Any, Any], exc: ElicitdError) -> Response[Any]:
    if isinstance(exc, SignInRequired):
        if exc.page:
            return _redirect(signin_path(exc.return_to))
        return _error_page(
            request, 401, exc.title, exc.detail, link=signin_path(exc.return_to), link_text=N_("Sign in again")
        )
    if isinstance(exc, ReauthenticationRequired):
        if exc.page:
            return _redirect(fresh_login_path(exc.return_to))
        return _error_page(
            request, 403, exc.title, exc.detail, link=fresh_login_path(exc.return_to), link_text=N_("Sign in again")
        )
    if exc.status >= 500:
        handle_elicitd_error(request, exc)  # logs it as the app does
    headers = {key: value for key, value in exc.headers.items() if key.lower() == "retry-after"}
    return _error_page(request, exc.status, exc.title, exc.detail, code=exc.problem_code, headers=headers)


def _console_http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """Litestar's own refusals (validation, not found, method) as a console page, same wording."""
    answered = handle_http_exception(request, exc)
    context = getattr(answered, "context", {}) or {}
    return _error_page(
        request,
        exc.status_code,
        str(context.get("title", N_("Request failed"))),
        str(context.get("detail", "")),
    )


def console_router(signin: ConsoleSignIn, sessions: async_sessionmaker[AsyncSession]) -> Router:
    modules = page_modules()
    handlers: list[Any] = [*SIGNIN_ROUTES]
    nav: list[NavEntry] = []
    for module in modules:
        handlers.extend(module.ROUTES)
        entry = getattr(module, "NAV", None)
        if entry is not None:
            order, href, label = entry
            nav.append(NavEntry(order=order, href=href, label=label, area=module.__name__.rpartition(_PAGE_MODULE)[2]))
    set_navigation(nav)
    return Router(
        path=PREFIX,
        route_handlers=handlers,
        guards=[ConsoleGuard(signin)],
        dependencies={"operator": Provide(provide_operator, sync_to_thread=False)},
        # The admin API's own audit mechanism, with the console's row (service.console.audit).
        middleware=[lambda app: AdminAuditMiddleware(app, sessions, console_row)],
        exception_handlers={ElicitdError: _console_error, HTTPException: _console_http_error},
        include_in_schema=False,
    )


def check_console_routes(app: Litestar) -> None:
    """At start-up: every console route that names an audit operation names one the admin API has,
    and takes the path parameters that operation's route names (so its ``target`` is the API's)."""
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or not route.path.startswith(PREFIX + "/"):
            continue
        for handler in route.route_handlers:
            operation = handler.opt.get("audit")
            if not operation:
                continue
            api = mirrored(app, str(operation))
            missing = api.params - set(route.path_parameters)
            if missing:
                raise LookupError(f"console route {route.path} mirrors {operation} but lacks {sorted(missing)}")
