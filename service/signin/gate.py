"""The browser identity check every kind page runs first (DESIGN §5).

A flow URL grants nothing by itself: before a page shows or accepts anything, the person in the
browser must prove — by logging in at the flow's issuer — that they are the flow's subject.

Interface for kind pages (``gate`` is the process's ``BrowserGate``, a handler dependency)::

    identity = await gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity            # a redirect to the issuer's login, or a refusal page
    ...                            # identity.iss/.sub are the flow's subject; render with identity.csrf_token
    checked = await gate.checked_post(request, flow_ref, kind)   # every POST handler: all checks, in order

The login itself (attempts, the callback, sessions) is ``service.signin.service.LoginService``;
the gate turns its answers into redirects and cookies.

``require_subject`` also writes the audit events: ``browser_visit`` for every checked request,
``subject_mismatch`` when another account opens the link (the flow itself is never touched).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.response import Template

from service.db.base import FLOW_ID
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, pending_flow
from service.flows.service import FlowService
from service.flows.states import Actor
from service.i18n import _
from service.identity import sessions as store
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.settings import Settings
from service.signin.account_page import safe_me_path
from service.signin.csrf import check_csrf, csrf_token_for
from service.signin.service import TOKEN, LoginService

# Where a login may return to: a flow page of this origin, or the own page of an issuer's users
# (``account_page``); nothing else (no open redirect).
_RETURN_TO = re.compile(r"^/f/fl_[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class BrowserIdentity:
    """The verified person in the browser, equal to the flow's subject."""

    session_id: str
    iss: str
    sub: str
    csrf_token: str = field(repr=False)


def safe_return_to(value: str | None) -> str | None:
    """The path itself when it is a same-origin flow page, the canonical ``/me?iss=…`` when it is
    a person's own page (``service.signin.account_page``), else None."""
    if value is not None and _RETURN_TO.fullmatch(value):
        return value
    return safe_me_path(value)


def flow_path(flow: Flow) -> str:
    return f"/f/{FLOW_ID.format(flow.id)}"


def session_cookie(settings: Settings, request: Request[Any, Any, Any]) -> str | None:
    value = request.cookies.get(store.cookie_name(settings, store.SESSION_COOKIE))
    return value if value is not None and TOKEN.fullmatch(value) else None


def make_cookie(
    settings: Settings, base: str, value: str, max_age: int, *, samesite: Literal["lax", "strict"] = "lax"
) -> Cookie:
    """Every session and sign-in cookie elicitd sets (the console's too): ``__Host-`` under TLS,
    ``HttpOnly``, ``Secure`` when the settings say so."""
    return Cookie(
        key=store.cookie_name(settings, base),
        value=value,
        max_age=max_age,
        path="/",
        secure=settings.secure_cookies,
        httponly=True,
        samesite=samesite,
    )


def clear_cookie(settings: Settings, base: str) -> Cookie:
    return make_cookie(settings, base, "", 0)


def redirect(location: str, *, cookies: list[Cookie] | None = None) -> Response[Any]:
    return Response(content=b"", status_code=303, headers={"Location": location, **PAGE_HEADERS}, cookies=cookies or [])


def _sub_digest(sub: str) -> str:
    return hashlib.sha256(sub.encode()).hexdigest()


def cross_site_origin(settings: Settings, request: Request[Any, Any, Any]) -> bool:
    """True when the browser says the request came from another site. Pages send
    ``Referrer-Policy: no-referrer``, under which browsers send ``Origin: null`` even for same-origin
    form posts; ``null`` (like no header) proves nothing either way, so the token decides alone."""
    origin = request.headers.get("origin")
    return origin not in (None, "null", settings.public_origin)


@dataclass(frozen=True, slots=True)
class CheckedPost:
    """A form POST on a flow page that passed every check: the flow is pending and of the expected
    kind, the browser is signed in as its subject, and the CSRF token matched."""

    flow: Flow
    identity: BrowserIdentity
    form: dict[str, str]


class BrowserGate:
    """Proves the person in the browser is the flow's subject before any kind page acts."""

    def __init__(
        self, *, settings: Settings, issuers: IssuerDirectory, flows: FlowService, logins: LoginService
    ) -> None:
        self.settings = settings
        self.issuers = issuers
        self.flows = flows
        self.logins = logins

    def session_cookie(self, request: Request[Any, Any, Any]) -> str | None:
        return session_cookie(self.settings, request)

    async def start_login(
        self, request: Request[Any, Any, Any], issuer: ResolvedIssuer, return_to: str, *, prompt: str | None = None
    ) -> Response[Any]:
        """Send the browser to the issuer with its login attempt, keeping its pre-login cookie."""
        settings = self.settings
        started = await self.logins.begin(
            issuer,
            return_to,
            binding=request.cookies.get(store.cookie_name(settings, store.LOGIN_COOKIE)),
            address=request.client.host if request.client else "",
            prompt=prompt,
        )
        cookie = make_cookie(settings, store.LOGIN_COOKIE, started.binding, store.LOGIN_STATE_SECONDS)
        return redirect(started.url, cookies=[cookie])

    async def login_for_page(
        self, request: Request[Any, Any, Any], path: str, *, prompt: str | None = None
    ) -> Response[Any]:
        """A sign-in for the flow page at ``path`` (a checked return address); back to the page
        itself when there is nothing to sign in for (it explains what became of the flow)."""
        issuer = await self.logins.issuer_for_page(path)
        if issuer is None:
            return redirect(path)
        return await self.start_login(request, issuer, path, prompt=prompt)

    def refusal_page(self, issuer: ResolvedIssuer, flow: Flow, session: store.SessionRow) -> Response[Any]:
        """403 "this link belongs to another account". Its sign-out form ends in a redirect to the
        issuer, so the issuer's origin is allowed as a form target (CSP form-action covers redirects)."""
        origin = urlsplit(issuer.authorization_endpoint)
        headers = {
            **PAGE_HEADERS,
            "Content-Security-Policy": f"default-src 'self'; frame-ancestors 'none'; form-action 'self' {origin.scheme}://{origin.netloc}",
        }
        context = {
            "issuer_name": issuer.display_name,
            "signed_in_as": session.sub,
            "csrf_token": csrf_token_for(session),
            "return_to": flow_path(flow),
            "flow_id": FLOW_ID.format(flow.id),
        }
        return Template(template_name="refused.html", context=context, status_code=403, headers=headers)

    async def require_subject(self, request: Request[Any, Any, Any], flow: Flow) -> BrowserIdentity | Response[Any]:
        """The browser's verified identity when it is the flow's subject; otherwise the response to send.

        * issuer not registered or disabled → an error page (403);
        * no session for the flow's issuer → a 303 redirect into an OIDC login there;
        * logged in as someone else → the refusal page (403) and a ``subject_mismatch`` event.

        Events are written for signed-in visitors only: an anonymous visit writes no row (anyone
        holding a link, or a script, could otherwise grow a flow's history without limit).
        """
        flows = self.flows
        issuer = await self.issuers.resolve(flow.subject_iss)
        if issuer is None:
            return page(
                "signin_problem.html",
                403,
                heading=_("This sign-in service is not trusted here"),
                text=_(
                    "The account this request is for belongs to a sign-in service this elicitd does not "
                    "trust, so it cannot check who you are. Ask the service that sent you here to contact "
                    "its administrator."
                ),
                flow_id=FLOW_ID.format(flow.id),
            )
        token = self.session_cookie(request)
        row = None
        if token is not None:
            async with flows.unit_of_work() as uow:
                row = await store.touch_session(uow.session, token)
                if row is not None and row.iss == flow.subject_iss:
                    if row.sub == flow.subject_sub:
                        await uow.event(
                            flow.id, "browser_visit", Actor.BROWSER, {"iss": row.iss, "method": request.method}
                        )
                    else:
                        await uow.event(
                            flow.id,
                            "subject_mismatch",
                            Actor.BROWSER,
                            {"iss": row.iss, "sub_sha256": _sub_digest(row.sub), "method": request.method},
                        )
        if row is None or row.iss != flow.subject_iss:
            return await self.start_login(request, issuer, flow_path(flow))
        csrf = csrf_token_for(row)
        if row.sub != flow.subject_sub:
            return self.refusal_page(issuer, flow, row)
        return BrowserIdentity(session_id=row.id.hex(), iss=row.iss, sub=row.sub, csrf_token=csrf)

    def check_csrf(self, request: Request[Any, Any, Any], identity: BrowserIdentity, submitted: str | None) -> None:
        """Raise ``CsrfFailed`` (403, ``csrf_failed``) unless ``submitted`` is this session's token
        (``service.signin.csrf``); a cross-site ``Origin`` is refused as well."""
        check_csrf(identity.csrf_token, submitted, cross_site=cross_site_origin(self.settings, request))

    async def checked_post(
        self, request: Request[Any, Any, Any], flow_ref: str, kind: str
    ) -> CheckedPost | Response[Any]:
        """The checks every flow page's POST needs, in the one safe order; a Response is sent as is."""
        found = await pending_flow(self.flows, flow_ref, kind)
        if isinstance(found, Response):
            return found
        identity = await self.require_subject(request, found)
        if isinstance(identity, Response):
            return identity
        raw = await request.form()
        form = {key: value for key, value in raw.items() if isinstance(value, str)}
        self.check_csrf(request, identity, form.get("csrf_token"))
        return CheckedPost(flow=found, identity=identity, form=form)
