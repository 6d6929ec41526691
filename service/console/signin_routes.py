"""The console's sign-in pages: ``/console/signin``, ``/console/auth/login``, ``/console/auth/callback``
and ``POST /console/auth/logout``. Public (the guard lets them through); every answer carries the
console's headers, and nothing the issuer sent is echoed on a page.

The callback answers with a short page that moves on to the console (a same-site navigation, by a
``<meta>`` refresh and a link) rather than a redirect: the session cookie is ``SameSite=Strict``,
and a browser would not send it on a redirect chain that began at the issuer's site.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter

from service.console import auth
from service.console.deps import ConsoleDeps
from service.console.guard import cross_site
from service.console.render import CONSOLE_HEADERS, render
from service.console.signin import safe_return_to
from service.identity.oidc import LoginFailed
from service.identity.sessions import LOGIN_STATE_SECONDS, cookie_name

_PUBLIC = {"public": True}
_ANSWER = ("code", "iss", "error")


def _redirect(location: str, cookies: list[Any] | None = None) -> Response[Any]:
    return Response(
        content=b"", status_code=303, headers={"Location": location, **CONSOLE_HEADERS}, cookies=cookies or []
    )


@get("/signin", opt=_PUBLIC, include_in_schema=False)
async def signin_page(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    return_to: Annotated[str | None, Parameter(query="return_to")] = None,
) -> Response[Any]:
    marked, issuer = await services.console.marked()
    del marked
    return render(request, "console/signin.html", issuer_name=issuer.display_name, return_to=safe_return_to(return_to))


@get("/auth/login", opt=_PUBLIC, include_in_schema=False)
async def login(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    return_to: Annotated[str | None, Parameter(query="return_to")] = None,
    fresh: Annotated[bool, Parameter(query="fresh")] = False,
) -> Response[Any]:
    settings = services.settings
    started = await services.console.begin(
        return_to,
        binding=request.cookies.get(cookie_name(settings, auth.LOGIN_COOKIE)),
        address=request.client.host if request.client else "",
        fresh=fresh,
    )
    return _redirect(started.url, [auth.login_cookie(settings, started.binding, LOGIN_STATE_SECONDS)])


@get("/auth/callback", opt=_PUBLIC, include_in_schema=False)
async def callback(request: Request[Any, Any, Any], services: ConsoleDeps) -> Response[Any]:
    settings = services.settings
    params = request.query_params
    try:
        signed_in = await services.console.complete(
            state=params.get("state"),
            binding=request.cookies.get(cookie_name(settings, auth.LOGIN_COOKIE)),
            answer={name: value for name in _ANSWER if (value := params.get(name)) is not None},
            replacing=request.cookies.get(cookie_name(settings, auth.SESSION_COOKIE)),
        )
    except LoginFailed as failed:
        failed.headers = {**CONSOLE_HEADERS, "Referrer-Policy": "no-referrer", **failed.headers}
        raise
    response = render(
        request,
        "console/signed_in.html",
        return_to=signed_in.return_to,
        # The callback's URL holds a code and a state: no referrer leaves this page.
        headers={"Referrer-Policy": "no-referrer"},
    )
    response.cookies = [
        auth.session_cookie(settings, signed_in.session_token, signed_in.lifetime),
        auth.login_cookie(settings, "", 0),
    ]
    return response


@post("/auth/logout", opt=_PUBLIC, status_code=200, include_in_schema=False)
async def logout(
    request: Request[Any, Any, Any],
    data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
    services: ConsoleDeps,
) -> Response[Any]:
    settings = services.settings
    await services.console.sign_out(
        request.cookies.get(cookie_name(settings, auth.SESSION_COOKIE)),
        submitted_csrf=data.get("csrf_token"),
        cross_site=cross_site(request, settings.public_origin),
    )
    response = render(request, "console/signed_out.html")
    response.cookies = [auth.session_cookie(settings, "", 0)]
    return response


SIGNIN_ROUTES = [signin_page, login, callback, logout]
