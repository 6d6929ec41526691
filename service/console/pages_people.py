"""The console's People page (``/console/people``): one person — a subject, issuer and ``sub`` — at a
glance, to answer "why did this person's tool call fail?" from one page.

The page is the admin API's ``GET /admin/v1/subjects`` (``service.admin.subjects``): the findings
first (the diagnosis, most decisive first, optionally for one server client), then each connection
with its status, health and reason, scopes per authorization, last use and grants, then the recent
flows with how they ended, and the consent receipts. Without a subject it lists the connections
that need reauthorization, each a link to its person.

Refresh, Revoke and Reconnect link call what ``adminRefreshConnection``, ``adminRevokeConnection``
and ``adminReconnectLink`` call and write those operations' audit rows. A reconnect link is shown
on the answer to its POST only; it is not a credential (it asks for the person's own sign-in).

Pages read in a session they never commit: the page answering a refused action then commits
nothing of its own, so that action's audit rows are exactly the API call's.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.response import Redirect

from service.admin import connections, reconnect_links, subjects
from service.admin.deps import OPERATOR
from service.console.auth import Operator
from service.console.deps import ConsoleDeps
from service.console.flow_words import refusal, template_words
from service.console.render import render
from service.errors import ElicitdError
from service.i18n import N_, _

NAV = (20, "/console/people", N_("People"))
ATTENTION = 20

_NOTICES = {
    "refreshed": N_("The connection's access token is refreshed."),
    "revoked": N_("The connection is revoked, at the provider where it could be and here always."),
}
_REFUSED = {
    "reauthorization_required": N_(
        "The provider refused the refresh: the person must reconnect (send them a reconnect link)."
    ),
    "no_refresh_token": N_("The connection holds no refresh token: only the person can renew it, by reconnecting."),
    "not_connected": N_("The connection is revoked: there is nothing to refresh."),
    "provider_refresh_failed": N_("The provider did not answer the refresh; try again later."),
    "not_reconnectable": N_("This connection cannot be reconnected (revoked, an API key, or no server may use it)."),
    "connection_not_found": N_("No connection with this id."),
    "server_client_not_found": N_("No server client with this name or id."),
    "invalid_request": N_("Name the person by their issuer and their sub at that issuer."),
}


async def _people_page(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    *,
    iss: str,
    sub: str,
    server_client: str = "",
    status: int = 200,
    notice: str | None = None,
    error: dict[str, Any] | None = None,
    link: reconnect_links.ReconnectLink | None = None,
) -> Response[Any]:
    overview = attention = None
    asked = {"iss": iss, "sub": sub, "server_client": server_client}
    try:
        async with services.sessions() as session:  # a read: nothing to commit
            if iss or sub:
                overview = await subjects.subject_overview(
                    session, iss=iss, sub=sub, server_client=server_client or None
                )
            else:
                attention = (
                    await connections.list_connections(session, health="needs_reauthorization", limit=ATTENTION)
                ).items
    except ElicitdError as exc:
        status, error = exc.status, refusal(_REFUSED, exc)
    return render(
        request,
        "console/people.html",
        status=status,
        area="people",
        asked=asked,
        overview=overview,
        attention=attention,
        notice=notice,
        error=error,
        link=link,
        **template_words(),
    )


@get("/people", name="console-people")
async def person(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    operator: Operator,
    iss: str | None = None,
    sub: str | None = None,
    server_client: str | None = None,
    done: str | None = None,
) -> Response[Any]:
    notice = _(_NOTICES[done]) if done in _NOTICES else None
    return await _people_page(
        request,
        services,
        iss=(iss or "").strip(),
        sub=(sub or "").strip(),
        server_client=(server_client or "").strip(),
        notice=notice,
    )


async def _subject_of(services: ConsoleDeps, connection_id: str) -> dict[str, str]:
    async with services.sessions() as session:  # a read: nothing to commit
        return (await connections.show_connection(session, connection_id)).subject


def _back(subject: dict[str, str], server_client: str, done: str) -> Redirect:
    from urllib.parse import urlencode

    query = {
        "iss": subject["iss"],
        "sub": subject["sub"],
        **({"server_client": server_client} if server_client else {}),
    }
    return Redirect(f"/console/people?{urlencode({**query, 'done': done})}#connections", status_code=303)


async def _client_field(request: Request[Any, Any, Any]) -> str:
    value = (await request.form()).get("server_client")
    return value.strip() if isinstance(value, str) else ""


async def _refused(
    request: Request[Any, Any, Any], services: ConsoleDeps, connection_id: str, client: str, exc: ElicitdError
) -> Response[Any]:
    if exc.problem_code == "connection_not_found":
        raise exc
    subject = await _subject_of(services, connection_id)
    return await _people_page(
        request,
        services,
        iss=subject["iss"],
        sub=subject["sub"],
        server_client=client,
        status=exc.status,
        error=refusal(_REFUSED, exc),
    )


@post(
    "/people/connections/{connection_id:str}/refresh",
    name="console-connection-refresh",
    opt={**OPERATOR, "audit": "adminRefreshConnection"},
)
async def refresh(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, connection_id: str
) -> Response[Any]:
    client = await _client_field(request)
    try:
        view = await connections.refresh_connection(services.connections, connection_id)
    except ElicitdError as exc:
        return await _refused(request, services, connection_id, client, exc)
    return _back(view.subject, client, "refreshed")


@post(
    "/people/connections/{connection_id:str}/revoke",
    name="console-connection-revoke",
    opt={**OPERATOR, "audit": "adminRevokeConnection"},
)
async def revoke(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, connection_id: str
) -> Response[Any]:
    client = await _client_field(request)
    try:
        done = await connections.revoke_connection(services.connections, connection_id)
    except ElicitdError as exc:
        return await _refused(request, services, connection_id, client, exc)
    return _back(done.connection.subject, client, "revoked")


@post(
    "/people/connections/{connection_id:str}/reconnect-link",
    name="console-connection-reconnect-link",
    opt={**OPERATOR, "audit": "adminReconnectLink"},
)
async def reconnect_link(
    request: Request[Any, Any, Any], services: ConsoleDeps, operator: Operator, connection_id: str
) -> Response[Any]:
    client = await _client_field(request)
    try:
        link = await reconnect_links.reconnect_link(services.read_sessions, services.flows, connection_id)
    except ElicitdError as exc:
        return await _refused(request, services, connection_id, client, exc)
    subject = await _subject_of(services, connection_id)
    return await _people_page(
        request, services, iss=subject["iss"], sub=subject["sub"], server_client=client, link=link
    )


ROUTES = [person, refresh, revoke, reconnect_link]
