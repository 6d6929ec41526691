"""Browser routes of the login: start (``/auth/login``), callback (``/auth/callback``), log out.

Every response here carries ``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer``: the
callback URL holds a code and a state that must never reach a cache or another site's logs.
Failures render a page with a fixed sentence; nothing the issuer sent is echoed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter

from service.errors import InvalidRequest
from service.flows.pages import PAGE_HEADERS, page
from service.i18n import N_, _
from service.identity import sessions as store
from service.identity.oidc import LoginFailed
from service.signin.deps import SigninDeps
from service.signin.gate import (
    clear_cookie,
    cross_site_origin,
    make_cookie,
    redirect,
    safe_return_to,
    session_cookie,
)
from service.signin.service import NotSignedIn

if TYPE_CHECKING:
    from service.settings import Settings

_TAGS = ["browser"]
# What the callback reads from the issuer's answer; anything else in the query is ignored.
_ANSWER = ("code", "iss", "error")


class InvalidReturnTo(InvalidRequest):
    code = "invalid_return_to"
    title = N_("Invalid return address")


@get(
    "/auth/login",
    operation_id="startBrowserLogin",
    tags=_TAGS,
    summary="Sign in for a flow page or the own page",
    description="Starts an OIDC login at the issuer of the page named by `return_to` (a `/f/<flow id>` "
    "path of this origin, or `/me?iss=<issuer>`), then comes back to it.",
)
async def login(
    request: Request[Any, Any, Any],
    return_to: Annotated[str | None, Parameter(query="return_to")] = None,
    switch: Annotated[bool, Parameter(query="switch")] = False,
    *,
    services: SigninDeps,
) -> Response[Any]:
    path = safe_return_to(return_to)
    if path is None:
        raise InvalidReturnTo(
            N_("A sign-in can only return to a request page of this site."), headers=dict(PAGE_HEADERS)
        )
    return await services.gate.login_for_page(request, path, prompt="login" if switch else None)


@get(
    "/auth/callback",
    operation_id="browserLoginCallback",
    tags=_TAGS,
    summary="OIDC login callback",
    description="The fixed redirect URI registered at every issuer.",
)
async def callback(request: Request[Any, Any, Any], services: SigninDeps) -> Response[Any]:
    settings = services.settings
    params = request.query_params
    try:
        outcome = await services.logins.complete(
            state=params.get("state"),
            binding=request.cookies.get(store.cookie_name(settings, store.LOGIN_COOKIE)),
            answer={name: value for name in _ANSWER if (value := params.get(name)) is not None},
            replacing=session_cookie(settings, request),
        )
    except LoginFailed as failed:
        # The failure page is still an answer to a URL holding a code and a state.
        failed.headers = {**PAGE_HEADERS, **failed.headers}
        raise
    if isinstance(outcome, NotSignedIn):
        return page(
            "signin_problem.html",
            400,
            heading=_("Sign-in was not completed"),
            text=_("The sign-in was cancelled or refused, so nothing was shared."),
            link=outcome.return_to,
            link_text=_("Try again"),
        )
    return redirect(
        outcome.return_to,
        cookies=[
            make_cookie(settings, store.SESSION_COOKIE, outcome.session_token, outcome.lifetime),
            clear_cookie(settings, store.LOGIN_COOKIE),
        ],
    )


@post(
    "/auth/logout",
    operation_id="browserLogout",
    tags=_TAGS,
    summary="Sign out of elicitd",
    status_code=303,
    description="Ends the browser session: only from this site, with a live session and its CSRF token "
    "(403 `csrf_failed` otherwise, and nothing changes). With `return_to` (a flow page) a new sign-in "
    "starts at once with `prompt=login`, which is how a person switches accounts.",
)
async def logout(
    request: Request[Any, Any, Any],
    data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
    services: SigninDeps,
) -> Response[Any]:
    settings = services.settings
    await services.logins.sign_out(
        session_cookie(settings, request),
        submitted_csrf=data.get("csrf_token"),
        cross_site=cross_site_origin(settings, request),
    )
    cookies = [clear_cookie(settings, store.SESSION_COOKIE)]
    path = safe_return_to(data.get("return_to"))
    if path is not None:
        return redirect(f"/auth/login?return_to={quote(path, safe='/')}&switch=true", cookies=cookies)
    return Response(
        content=_signed_out(request, settings),
        status_code=200,
        media_type="text/html",
        headers=dict(PAGE_HEADERS),
        cookies=cookies,
    )


def _signed_out(request: Request[Any, Any, Any], settings: Settings) -> str:
    engine = request.app.template_engine
    assert engine is not None
    rendered: str = engine.get_template("signin_problem.html").render(
        heading=_("Signed out"),
        text=_("You are signed out of elicitd. You can close this tab."),
        domain=settings.public_origin,
    )
    return rendered


IDENTITY_ROUTES = [login, callback, logout]
