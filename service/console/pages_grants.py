"""Console pages for grants and trust groups (``/console/grants``, ``/console/trust-groups``).

Every action runs the function its admin API route runs (``service.grants.operators``) in one
unit of work, with the body that route takes, and names the operation it mirrors
(``opt["audit"]``) with the same path parameters, so its audit row is that route's: *Revoke*
needs operator; giving a grant and every trust-group change need admin with a recent sign-in.

Giving a grant is two steps because the API's route names the connection and the grantee in its
path (``PUT /connections/{connection_id}/grants/{grantee}``, so its audit row says who got what):
a GET form picks both and shows the connection with its authorizations; its confirming form posts
to the console route with the same two path parameters.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from litestar import Request, get, post
from litestar.response import Redirect, Template

from service.admin import connections
from service.admin.deps import OPERATOR, in_unit
from service.console.client_forms import FormError, body
from service.console.client_pages import ADMIN_CHANGE, attempt, form_of
from service.console.deps import ConsoleDeps
from service.console.directory_forms import group_create, group_shown, group_update
from service.console.render import render
from service.grants import operators
from service.grants.operators import CreateTrustGroup, GiveGrant, UpdateTrustGroup
from service.i18n import N_, _

NAV = (50, "/console/grants", N_("Grants and trust groups"))
AREA = "grants"
PAGE = 50
GROUP_GRANTS = 20
AnyRequest = Request[Any, Any, Any]

_NOTICES = {
    "revoked": N_("The grant is revoked: the grantee's next token request finds no connection."),
    "given": N_("The grant is given."),
    "group_created": N_("The trust group is declared."),
    "group_saved": N_("The change is saved."),
    "group_deleted": N_("The trust group is deleted, and its grants with it."),
}


def _page(request: AnyRequest, template: str, *, status: int = 200, **context: Any) -> Template:
    done = request.query_params.get("done")
    notice = _(_NOTICES[done]) if done in _NOTICES else None
    return render(request, template, status=status, area=AREA, notice=notice, **context)


def _redirect(path: str, done: str) -> Redirect:
    return Redirect(f"{path}?done={done}", status_code=303)


# ---- grants ------------------------------------------------------------------------------------------
@get("/grants", name="console-grants")
async def grants_page(
    request: AnyRequest,
    services: ConsoleDeps,
    connection_id: str | None = None,
    server_client: str | None = None,
    trust_group: str | None = None,
    live: str | None = None,
    cursor: str | None = None,
) -> Template:
    """Grants, oldest first, by the API's own filters; an unknown client or group is said on the page."""
    texts = {"connection_id": connection_id, "server_client": server_client, "trust_group": trust_group}
    query = {name: value.strip() for name, value in texts.items() if value and value.strip()}
    only_live = bool(live)
    filters: dict[str, Any] = {**dict.fromkeys(texts), **query, "live": only_live}
    found = await attempt(
        lambda: in_unit(
            services,
            operators.list_grants,
            connection=query.get("connection_id"),
            server_client=query.get("server_client"),
            trust_group=query.get("trust_group"),
            live=only_live,
            cursor=cursor,
            limit=PAGE,
        )
    )
    if isinstance(found, FormError):
        return _page(
            request,
            "console/grants.html",
            status=found.status,
            grants=[],
            filters=filters,
            error=found,
            area_tab="grants",
        )
    if only_live:
        query["live"] = "1"
    next_query = urlencode({**query, "cursor": found.next_cursor or ""})
    return _page(
        request,
        "console/grants.html",
        grants=found.items,
        next_cursor=found.next_cursor,
        next_query=next_query,
        filters=filters,
        error=None,
        area_tab="grants",
    )


@get("/grants/{grant_id:str}", name="console-grant")
async def grant_page(request: AnyRequest, services: ConsoleDeps, grant_id: str) -> Template:
    grant = await in_unit(services, operators.show_grant, grant_id)
    return _page(request, "console/grants_detail.html", grant=grant, error=None)


@post(
    "/grants/{grant_id:str}/revoke",
    name="console-grant-revoke",
    opt={**OPERATOR, "audit": "adminRevokeGrant"},
)
async def revoke_grant(request: AnyRequest, services: ConsoleDeps, grant_id: str) -> Redirect:
    await in_unit(services, operators.revoke_grant, grant_id)
    return _redirect(f"/console/grants/{quote(grant_id, safe='')}", "revoked")


async def _give(
    request: AnyRequest,
    services: ConsoleDeps,
    connection_id: str,
    grantee: str,
    *,
    error: FormError | None = None,
) -> Template:
    """The give page: the choice, and once both are named, the connection to confirm against."""
    values = {"connection_id": connection_id, "grantee": grantee}
    connection = None
    if connection_id and grantee:
        found = await attempt(lambda: in_unit(services, connections.show_connection, connection_id))
        if isinstance(found, FormError):
            error = error or found
        else:
            connection = found
    return _page(
        request,
        "console/grants_give.html",
        status=error.status if error else 200,
        values=values,
        connection=connection,
        error=error,
        area_tab="give",
    )


@get("/grants/give", name="console-grant-give", opt=ADMIN_CHANGE)
async def give_page(request: AnyRequest, services: ConsoleDeps, connection_id: str = "", grantee: str = "") -> Template:
    return await _give(request, services, connection_id.strip(), grantee.strip())


@post(
    "/connections/{connection_id:str}/grants/{grantee:str}",
    name="console-grant-give-confirm",
    opt={**ADMIN_CHANGE, "audit": "adminGiveGrant"},
)
async def give_grant(
    request: AnyRequest, services: ConsoleDeps, connection_id: str, grantee: str
) -> Redirect | Template:
    form = await form_of(request)
    scopes = form.lines("scopes")
    given = await attempt(
        lambda: in_unit(
            services,
            operators.give_grant,
            services.vault,
            connection_id,
            grantee,
            list(body(GiveGrant, {"scopes": scopes}).scopes),
        )
    )
    if isinstance(given, FormError):
        return await _give(request, services, connection_id, grantee, error=given)
    return _redirect(f"/console/grants/{given.id}", "given")


# ---- trust groups ------------------------------------------------------------------------------------
@get("/trust-groups", name="console-trust-groups")
async def groups_page(request: AnyRequest, services: ConsoleDeps) -> Template:
    found = await in_unit(services, operators.list_trust_groups)
    return _page(request, "console/grants_groups.html", groups=found, area_tab="groups")


def _new_group(request: AnyRequest, *, values: dict[str, Any], error: FormError | None = None) -> Template:
    return _page(
        request, "console/grants_group_new.html", status=error.status if error else 200, values=values, error=error
    )


@get("/new/trust-group", name="console-trust-group-new", opt=ADMIN_CHANGE)
async def new_group_page(request: AnyRequest) -> Template:
    return _new_group(request, values=group_shown())


@post("/trust-groups", name="console-trust-group-create", opt={**ADMIN_CHANGE, "audit": "adminCreateTrustGroup"})
async def create_group(request: AnyRequest, services: ConsoleDeps) -> Redirect | Template:
    form = await form_of(request)
    made = await attempt(
        lambda: in_unit(services, operators.create_trust_group, body(CreateTrustGroup, group_create(form)))
    )
    if isinstance(made, FormError):
        return _new_group(request, values=group_shown(form), error=made)
    return _redirect(f"/console/trust-groups/{made.id}", "group_created")


async def _group(
    request: AnyRequest,
    services: ConsoleDeps,
    group: str,
    *,
    error: FormError | None = None,
    values: dict[str, Any] | None = None,
) -> Template:
    async def load(session: Any) -> tuple[operators.TrustGroupView, operators.GrantPage]:
        view = await operators.show_trust_group(session, group)
        grants = await operators.list_grants(session, trust_group=view.id, live=True, limit=GROUP_GRANTS)
        return view, grants

    view, grants = await in_unit(services, load)
    shown = values or {
        "display_name": view.display_name,
        "members": [m.name for m in view.members],
        "allow_unproven": view.allow_unproven,
    }
    return _page(
        request,
        "console/grants_group.html",
        status=error.status if error else 200,
        group=view,
        grants=grants.items,
        more_grants=grants.next_cursor is not None,
        values=shown,
        error=error,
        edit_open=values is not None,
    )


@get("/trust-groups/{group:str}", name="console-trust-group")
async def group_page(request: AnyRequest, services: ConsoleDeps, group: str) -> Template:
    return await _group(request, services, group)


@post(
    "/trust-groups/{group:str}",
    name="console-trust-group-update",
    opt={**ADMIN_CHANGE, "audit": "adminUpdateTrustGroup"},
)
async def update_group(request: AnyRequest, services: ConsoleDeps, group: str) -> Redirect | Template:
    form = await form_of(request)
    changes = group_update(form)
    done = await attempt(
        lambda: in_unit(services, operators.update_trust_group, group, body(UpdateTrustGroup, changes))
    )
    if isinstance(done, FormError):  # a group that is gone: its page answers 404 itself
        return await _group(request, services, group, error=done, values=changes)
    return _redirect(f"/console/trust-groups/{quote(group, safe='')}", "group_saved")


@post(
    "/trust-groups/{group:str}/delete",
    name="console-trust-group-delete",
    opt={**ADMIN_CHANGE, "audit": "adminDeleteTrustGroup"},
)
async def delete_group(request: AnyRequest, services: ConsoleDeps, group: str) -> Redirect:
    await in_unit(services, operators.delete_trust_group, group)
    return _redirect("/console/trust-groups", "group_deleted")


ROUTES = [
    grants_page,
    give_page,
    grant_page,
    revoke_grant,
    give_grant,
    groups_page,
    new_group_page,
    create_group,
    group_page,
    update_group,
    delete_group,
]
