"""Console pages for providers and issuers (``/console/providers``, ``/console/issuers``): the lists,
one provider's or issuer's page, adding, changing, enabling, disabling and *Test discovery*.

Every action runs what its admin API route runs (``service.admin.directory_actions``, and
``directory.check_*_discovery`` for the test), with the body that route takes
(``directory_forms``), and names the operation it mirrors (``opt["audit"]``), so its audit row is
that route's. Reading needs viewer, testing discovery operator, every change admin with a recent
sign-in, as in the API. A client secret is write-only: its input never carries a value, and no
page says more than whether one is stored.

An issuer is named by its URL, so its page and actions carry it as ``?issuer=`` or a form field,
as the API's issuer routes take it in the body (their audit rows name no target either).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import Request, get, post
from litestar.response import Redirect, Template

from service.admin import directory, directory_actions
from service.admin.api_directory import IssuerRef
from service.admin.deps import OPERATOR, in_unit
from service.admin.directory import CreateIssuer, CreateProvider, UpdateIssuer, UpdateProvider
from service.connections.catalog import CATALOG
from service.console import directory_forms as forms
from service.console.client_forms import Form, FormError, body
from service.console.client_pages import ADMIN_CHANGE, attempt, form_of
from service.console.deps import ConsoleDeps
from service.console.render import render
from service.i18n import N_, _
from service.operators.store import marked_issuer

NAV = (40, "/console/providers", N_("Providers and issuers"))
AREA = "directory"
AnyRequest = Request[Any, Any, Any]

_NOTICES = {
    "created": N_("The provider is added."),
    "saved": N_("The change is saved."),
    "disabled": N_("The provider is disabled: no new connect flow can use it."),
    "enabled": N_("The provider is enabled."),
    "issuer_created": N_("The issuer is trusted."),
    "issuer_disabled": N_("The issuer is disabled: its browser sessions have ended."),
    "issuer_enabled": N_("The issuer is enabled."),
}


def _page(request: AnyRequest, template: str, *, status: int = 200, **context: Any) -> Template:
    done = request.query_params.get("done")
    notice = _(_NOTICES[done]) if done in _NOTICES else None
    return render(request, template, status=status, area=AREA, notice=notice, **context)


def _redirect(path: str, done: str) -> Redirect:
    return Redirect(f"{path}{'&' if '?' in path else '?'}done={done}", status_code=303)


def _provider_path(name: str) -> str:
    return "/console/providers/" + quote(name, safe="")


def _issuer_path(issuer: str) -> str:
    return "/console/issuers/detail?issuer=" + quote(issuer, safe="")


def _catalog_keys() -> list[str]:
    return sorted(key for key, entry in CATALOG.items() if entry.auth_mode == "oauth2")


# ---- providers ---------------------------------------------------------------------------------------
@get("/providers", name="console-providers")
async def providers_page(request: AnyRequest, services: ConsoleDeps) -> Template:
    found = await in_unit(services, directory.list_provider_views)
    return _page(request, "console/providers.html", providers=found, area_tab="providers")


def _new_provider(request: AnyRequest, *, values: dict[str, Any], error: FormError | None = None) -> Template:
    return _page(
        request,
        "console/providers_new.html",
        status=error.status if error else 200,
        values=values,
        error=error,
        catalog_keys=_catalog_keys(),
        auth_methods=forms.AUTH_METHODS,
    )


@get("/new/provider", name="console-provider-new", opt=ADMIN_CHANGE)
async def new_provider_page(request: AnyRequest) -> Template:
    return _new_provider(request, values=forms.provider_shown())


@post("/providers", name="console-provider-create", opt={**ADMIN_CHANGE, "audit": "adminCreateProvider"})
async def create_provider(request: AnyRequest, services: ConsoleDeps) -> Redirect | Template:
    form = await form_of(request)
    made = await attempt(
        lambda: directory_actions.add_provider(services, body(CreateProvider, forms.provider_create(form)))
    )
    if isinstance(made, FormError):
        return _new_provider(request, values=forms.provider_shown(form), error=made)
    return _redirect(_provider_path(made.name), "created")


async def _provider(
    request: AnyRequest,
    services: ConsoleDeps,
    name: str,
    *,
    report: directory.DiscoveryReport | None = None,
    error: FormError | None = None,
    typed: Form | None = None,
) -> Template:
    """The provider's page; after a refused change, with the refusal and what was typed."""
    view = await in_unit(services, directory.show_provider, name)
    return _page(
        request,
        "console/providers_detail.html",
        status=error.status if error else 200,
        provider=view,
        report=report,
        error=error,
        values=forms.provider_typed(typed, view) if typed else forms.provider_current(view),
        edit_open=typed is not None,
        auth_methods=forms.AUTH_METHODS,
    )


@get("/providers/{name:str}", name="console-provider")
async def provider_page(request: AnyRequest, services: ConsoleDeps, name: str) -> Template:
    return await _provider(request, services, name)


@post("/providers/{name:str}", name="console-provider-update", opt={**ADMIN_CHANGE, "audit": "adminUpdateProvider"})
async def update_provider(request: AnyRequest, services: ConsoleDeps, name: str) -> Redirect | Template:
    form = await form_of(request)
    view = await in_unit(services, directory.show_provider, name)
    changes = forms.provider_update(form, view)
    done = await attempt(lambda: directory_actions.change_provider(services, name, body(UpdateProvider, changes)))
    if isinstance(done, FormError):
        return await _provider(request, services, name, error=done, typed=form)
    return _redirect(_provider_path(name), "saved")


@post(
    "/providers/{name:str}/disable",
    name="console-provider-disable",
    opt={**ADMIN_CHANGE, "audit": "adminDisableProvider"},
)
async def disable_provider(request: AnyRequest, services: ConsoleDeps, name: str) -> Redirect:
    await directory_actions.switch_provider(services, name, False)
    return _redirect(_provider_path(name), "disabled")


@post(
    "/providers/{name:str}/enable", name="console-provider-enable", opt={**ADMIN_CHANGE, "audit": "adminEnableProvider"}
)
async def enable_provider(request: AnyRequest, services: ConsoleDeps, name: str) -> Redirect:
    await directory_actions.switch_provider(services, name, True)
    return _redirect(_provider_path(name), "enabled")


@post(
    "/providers/{name:str}/test-discovery",
    name="console-provider-discovery",
    opt={**OPERATOR, "audit": "adminTestProviderDiscovery"},
    status_code=200,
)
async def test_provider_discovery(request: AnyRequest, services: ConsoleDeps, name: str) -> Template:
    """The provider's page with what discovery found now (a read: answering it again repeats nothing)."""
    report = await directory.check_provider_discovery(services.read_sessions, services.vault, services.http, name)
    return await _provider(request, services, name, report=report)


# ---- issuers -----------------------------------------------------------------------------------------
async def _signin_issuer(services: ConsoleDeps) -> str | None:
    async with services.read_sessions() as session:
        marked = await marked_issuer(session)
    return None if marked is None else marked.signin.issuer


@get("/issuers", name="console-issuers")
async def issuers_page(request: AnyRequest, services: ConsoleDeps) -> Template:
    found = await in_unit(services, directory.list_issuer_views)
    return _page(
        request, "console/issuers.html", issuers=found, signin_issuer=await _signin_issuer(services), area_tab="issuers"
    )


def _new_issuer(request: AnyRequest, *, values: dict[str, Any], error: FormError | None = None) -> Template:
    return _page(
        request,
        "console/issuers_new.html",
        status=error.status if error else 200,
        values=values,
        error=error,
        issuer=None,
    )


@get("/new/issuer", name="console-issuer-new", opt=ADMIN_CHANGE)
async def new_issuer_page(request: AnyRequest) -> Template:
    return _new_issuer(request, values=forms.issuer_shown())


@post("/issuers", name="console-issuer-create", opt={**ADMIN_CHANGE, "audit": "adminCreateIssuer"})
async def create_issuer(request: AnyRequest, services: ConsoleDeps) -> Redirect | Template:
    form = await form_of(request)
    made = await attempt(lambda: directory_actions.add_issuer(services, body(CreateIssuer, forms.issuer_create(form))))
    if isinstance(made, FormError):
        return _new_issuer(request, values=forms.issuer_shown(form), error=made)
    return _redirect(_issuer_path(made.issuer), "issuer_created")


async def _issuer(
    request: AnyRequest,
    services: ConsoleDeps,
    issuer: str,
    *,
    report: directory.DiscoveryReport | None = None,
    error: FormError | None = None,
    typed: Form | None = None,
) -> Template:
    view = await in_unit(services, directory.show_issuer, issuer)
    return _page(
        request,
        "console/issuers_detail.html",
        status=error.status if error else 200,
        issuer=view,
        report=report,
        error=error,
        values=forms.issuer_typed(typed, view) if typed else forms.issuer_current(view),
        edit_open=typed is not None,
        is_signin_issuer=view.issuer == await _signin_issuer(services),
    )


@get("/issuers/detail", name="console-issuer")
async def issuer_page(request: AnyRequest, services: ConsoleDeps, issuer: str) -> Template:
    return await _issuer(request, services, issuer)


async def _issuer_field(request: AnyRequest) -> tuple[Form, str]:
    """The form and the issuer it names, checked as the API checks its body (a 400 otherwise)."""
    form = await form_of(request)
    return form, body(IssuerRef, {"issuer": form.get("issuer")}).issuer


@post("/issuers/update", name="console-issuer-update", opt={**ADMIN_CHANGE, "audit": "adminUpdateIssuer"})
async def update_issuer(request: AnyRequest, services: ConsoleDeps) -> Redirect | Template:
    form, issuer = await _issuer_field(request)
    view = await in_unit(services, directory.show_issuer, issuer)
    changes = forms.issuer_update(form, view)
    done = await attempt(lambda: directory_actions.change_issuer(services, body(UpdateIssuer, changes)))
    if isinstance(done, FormError):
        return await _issuer(request, services, issuer, error=done, typed=form)
    return _redirect(_issuer_path(issuer), "saved")


@post("/issuers/disable", name="console-issuer-disable", opt={**ADMIN_CHANGE, "audit": "adminDisableIssuer"})
async def disable_issuer(request: AnyRequest, services: ConsoleDeps) -> Redirect:
    _, issuer = await _issuer_field(request)
    await directory_actions.switch_issuer(services, issuer, False)
    return _redirect(_issuer_path(issuer), "issuer_disabled")


@post("/issuers/enable", name="console-issuer-enable", opt={**ADMIN_CHANGE, "audit": "adminEnableIssuer"})
async def enable_issuer(request: AnyRequest, services: ConsoleDeps) -> Redirect:
    _, issuer = await _issuer_field(request)
    await directory_actions.switch_issuer(services, issuer, True)
    return _redirect(_issuer_path(issuer), "issuer_enabled")


@post(
    "/issuers/test-discovery",
    name="console-issuer-discovery",
    opt={**OPERATOR, "audit": "adminTestIssuerDiscovery"},
    status_code=200,
)
async def test_issuer_discovery(request: AnyRequest, services: ConsoleDeps) -> Template:
    _, issuer = await _issuer_field(request)
    report = await directory.check_issuer_discovery(services.read_sessions, services.issuers, issuer)
    return await _issuer(request, services, issuer, report=report)


ROUTES = [
    providers_page,
    new_provider_page,
    create_provider,
    provider_page,
    update_provider,
    disable_provider,
    enable_provider,
    test_provider_discovery,
    issuers_page,
    new_issuer_page,
    create_issuer,
    issuer_page,
    update_issuer,
    disable_issuer,
    enable_issuer,
    test_issuer_discovery,
]
