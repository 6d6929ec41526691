"""Browser routes of the login: start (``/auth/login``), callback (``/auth/callback``), log out.

Every response here carries ``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer``: the
callback URL holds a code and a state that must never reach a cache or another site's logs.
Failures render a page with a fixed sentence; nothing the issuer sent is echoed.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated, Any

from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter

from service.db.base import FLOW_ID
from service.errors import InvalidRequest
from service.flows.pages import PAGE_HEADERS, page
from service.identity import sessions as store
from service.identity.oidc import LoginFailed, exchange_code, verify_id_token
from service.signin.gate import (
    CsrfFailed,
    clear_cookie,
    cross_site_origin,
    csrf_token_for,
    make_cookie,
    redirect,
    redirect_uri,
    safe_return_to,
    session_cookie,
)

if TYPE_CHECKING:
    from service.services import Services
    from service.settings import Settings

_TAGS = ["browser"]


class LoginStateInvalid(LoginFailed):
    code = "login_state_invalid"
    title = "This sign-in link is not valid"


class IssuerMismatch(LoginFailed):
    code = "issuer_mismatch"
    title = "Sign-in answered by the wrong service"


class InvalidReturnTo(InvalidRequest):
    code = "invalid_return_to"
    title = "Invalid return address"


def _fail(cls: type[LoginFailed], detail: str) -> LoginFailed:
    return cls(detail, headers=dict(PAGE_HEADERS))


@get(
    "/auth/login",
    operation_id="startBrowserLogin",
    tags=_TAGS,
    summary="Sign in for a flow page",
    description="Starts an OIDC login at the issuer of the flow named by `return_to` (a `/f/<flow id>` "
    "path of this origin), then comes back to it.",
)
async def login(
    request: Request[Any, Any, Any],
    return_to: Annotated[str | None, Parameter(query="return_to")] = None,
    switch: Annotated[bool, Parameter(query="switch")] = False,
    *,
    services: Services,
) -> Response[Any]:
    path = safe_return_to(return_to)
    if path is None:
        raise InvalidReturnTo("A sign-in can only return to a request page of this site.", headers=dict(PAGE_HEADERS))
    flows = services.flows
    flow_id = FLOW_ID.parse(path.removeprefix("/f/"))
    flow = None if flow_id is None else await flows.read(flow_id)
    if flow is None or flow.status != "pending":
        return redirect(path)  # the flow page explains what became of it
    issuer = await services.issuers.resolve(flow.subject_iss)
    if issuer is None:
        return redirect(path)  # the flow page shows the untrusted-issuer page
    return await services.gate.start_login(request, issuer, path, prompt="login" if switch else None)


@get(
    "/auth/callback",
    operation_id="browserLoginCallback",
    tags=_TAGS,
    summary="OIDC login callback",
    description="The fixed redirect URI registered at every issuer.",
)
async def callback(request: Request[Any, Any, Any], services: Services) -> Response[Any]:
    settings = services.settings
    directory = services.issuers
    params = request.query_params
    state = params.get("state")
    binding = request.cookies.get(store.cookie_name(settings, store.LOGIN_COOKIE))
    if not state or not binding:
        raise _fail(
            LoginStateInvalid,
            "This sign-in was not started in this browser, or it took too long. "
            "Open the link from your assistant again.",
        )
    async with services.sessions() as session:
        attempt = await store.consume_login_attempt(session, services.vault, state=state, browser_binding=binding)
        await session.commit()
    if attempt is None:
        raise _fail(
            LoginStateInvalid,
            "This sign-in was already used, has expired, or was started in another "
            "browser. Open the link from your assistant again.",
        )
    issuer = await directory.resolve_id(attempt.issuer_id)
    if issuer is None:
        raise _fail(LoginFailed, "This sign-in service is no longer trusted here.")
    # RFC 9207: the response must come from the issuer we sent the browser to — checked before the
    # code goes anywhere, so a mix-up attacker never sees it redeemed at the wrong token endpoint.
    returned_iss = params.get("iss")
    if returned_iss is not None and returned_iss != issuer.issuer:
        raise _fail(IssuerMismatch, "The sign-in answer did not come from the expected service.")
    if returned_iss is None and issuer.iss_parameter_supported:
        raise _fail(IssuerMismatch, "The sign-in answer did not say which service sent it.")
    if params.get("error") is not None:
        return page(
            "signin_problem.html",
            400,
            heading="Sign-in was not completed",
            text="The sign-in was cancelled or refused, so nothing was shared.",
            link=attempt.return_to,
            link_text="Try again",
        )
    code = params.get("code")
    if not code:
        raise _fail(LoginFailed, "The sign-in service sent no authorization code.")
    tokens = await exchange_code(
        issuer, code=code, redirect_uri=redirect_uri(settings), code_verifier=attempt.code_verifier
    )
    verified = await verify_id_token(directory, issuer, tokens.get("id_token"), nonce=attempt.nonce)
    lifetime = settings.browser_session_seconds
    async with services.sessions() as session:
        if (old := session_cookie(settings, request)) is not None:
            await store.delete_session(session, old)  # never keep two live sessions for one browser
        token = await store.create_browser_session(
            session, issuer_id=issuer.id, iss=verified.iss, sub=verified.sub, lifetime=lifetime
        )
        await store.purge_expired(session, batch=100)
        await session.commit()
    return redirect(
        attempt.return_to,
        cookies=[
            make_cookie(settings, store.SESSION_COOKIE, token, lifetime),
            clear_cookie(settings, store.LOGIN_COOKIE),
        ],
    )


@post(
    "/auth/logout",
    operation_id="browserLogout",
    tags=_TAGS,
    summary="Sign out of elicitd",
    status_code=303,
    description="Ends the browser session (CSRF-protected). With `return_to` (a flow page) a new sign-in "
    "starts at once with `prompt=login`, which is how a person switches accounts.",
)
async def logout(
    request: Request[Any, Any, Any],
    data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
    services: Services,
) -> Response[Any]:
    settings = services.settings
    token = session_cookie(settings, request)
    if token is not None:
        async with services.sessions() as session:
            row = await store.touch_session(session, token)
            submitted = data.get("csrf_token")
            if row is not None and (
                submitted is None
                or cross_site_origin(settings, request)
                or not hmac.compare_digest(csrf_token_for(row).encode(), submitted.encode())
            ):
                raise CsrfFailed
            await store.delete_session(session, token)
            await session.commit()
    cookies = [clear_cookie(settings, store.SESSION_COOKIE)]
    path = safe_return_to(data.get("return_to"))
    if path is not None:
        return redirect(f"/auth/login?return_to={path}&switch=true", cookies=cookies)
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
        heading="Signed out",
        text="You are signed out of elicitd. You can close this tab.",
        domain=settings.public_origin,
    )
    return rendered


IDENTITY_ROUTES = [login, callback, logout]
