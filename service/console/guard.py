"""The console's guard: who is signed in, the route's least role, CSRF, recent authentication.

Every console route but the sign-in pages (``opt={"public": True}``) passes, in this order:

1. a live console session (``service.console.auth``); without one a page (GET) is sent to sign in
   and comes back, and a form (POST) gets a page saying the session ended (its body is not kept);
2. on every POST (and any other unsafe method): the session's CSRF token, from the form's
   ``csrf_token`` field or an ``X-CSRF-Token`` header, and no other site's ``Origin`` or
   ``Sec-Fetch-Site`` (403 ``csrf_failed``);
3. the route's least role, ``opt["role"]`` (viewer when absent): 403 otherwise;
4. with ``opt["fresh"]``, an authentication at most ``ELICITD_CONSOLE_REAUTH_SECONDS`` old: a page
   is sent to sign in again (``max_age``); a form gets a 403 page with a link that does.

The operator is kept in the request's state for the ``operator`` dependency, ``render`` and the
audit row (``service.console.audit``), which is written for refused calls too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from service.admin.tokens import Role
from service.console import auth
from service.console.audit import OPERATOR_STATE
from service.console.signin import ConsoleSignIn, safe_return_to
from service.errors import Forbidden, Unauthenticated
from service.i18n import N_
from service.identity.sessions import cookie_name
from service.signin.csrf import CsrfFailed, check_csrf

_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class SignInRequired(Unauthenticated):
    """No live console session. A page is redirected to sign in; a form gets this as a page."""

    code = "console_signin_required"
    title = N_("Please sign in again")

    def __init__(self, return_to: str, *, page: bool) -> None:
        super().__init__(N_("Your console session has ended. Sign in again, then repeat what you were doing."))
        self.return_to = return_to
        self.page = page


class RoleRequired(Forbidden):
    code = "forbidden"
    title = N_("Not allowed for your role")

    def __init__(self, needed: Role) -> None:
        super().__init__(
            {
                Role.OPERATOR: N_("This needs the operator or admin role."),
                Role.ADMIN: N_("This needs the admin role."),
            }.get(needed, N_("This needs a console role."))
        )
        self.needed = needed


class ReauthenticationRequired(Forbidden):
    """An admin-role change needs a recent sign-in; ``return_to`` is where the new one comes back."""

    code = "reauthentication_required"
    title = N_("Confirm it is you")

    def __init__(self, return_to: str, *, page: bool) -> None:
        super().__init__(N_("This change needs a recent sign-in. Sign in again, then repeat it."))
        self.return_to = return_to
        self.page = page


def fresh_login_path(return_to: str) -> str:
    return f"/console/auth/login?fresh=1&return_to={quote(return_to, safe='/')}"


def signin_path(return_to: str) -> str:
    return f"/console/signin?return_to={quote(return_to, safe='/')}"


def _here(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    query = connection.scope.get("query_string", b"").decode("latin-1")
    return safe_return_to(connection.url.path + (f"?{query}" if query else ""))


def _form_page(connection: ASGIConnection[Any, Any, Any, Any], public_origin: str) -> str:
    """The page a refused form was on (its same-origin ``Referer``), to come back to after signing
    in again; the console's home when the browser did not say."""
    referer = connection.headers.get("referer") or ""
    if referer.startswith(public_origin + "/"):
        return safe_return_to(referer[len(public_origin) :])
    return "/console/"


def cross_site(connection: ASGIConnection[Any, Any, Any, Any], public_origin: str) -> bool:
    """True when the browser says the request came from another site (or from no page at all,
    for a form: ``Sec-Fetch-Site: none`` is a typed or bookmarked URL, never a form post)."""
    origin = connection.headers.get("origin")
    if origin not in (None, "null", public_origin):
        return True
    return connection.headers.get("sec-fetch-site") in {"cross-site", "same-site"}


class ConsoleGuard:
    def __init__(self, signin: ConsoleSignIn) -> None:
        self._signin = signin

    def __deepcopy__(self, memo: dict[int, Any]) -> ConsoleGuard:
        return self  # Litestar copies routers when it registers them; the service is shared

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        opt = handler.opt
        if opt.get("public"):
            return
        settings = self._signin.settings
        method = connection.scope.get("method", "GET")
        page = method in _SAFE
        token = connection.cookies.get(cookie_name(settings, auth.SESSION_COOKIE))
        operator = await self._signin.current(token)
        if operator is None:
            raise SignInRequired(
                _here(connection) if page else _form_page(connection, settings.public_origin), page=page
            )
        connection.scope["state"][OPERATOR_STATE] = operator
        if not page:
            submitted = connection.headers.get("x-csrf-token")
            if submitted is None and isinstance(connection, Request):
                form = await connection.form()
                value = form.get("csrf_token")
                submitted = value if isinstance(value, str) else None
            if cross_site(connection, settings.public_origin):
                raise CsrfFailed
            check_csrf(operator.csrf_token, submitted, cross_site=False)
        needed = opt.get("role", Role.VIEWER)
        if not operator.can(needed):
            raise RoleRequired(needed)
        if opt.get("fresh") and not operator.fresh(self._signin.now(), settings.console_reauth_seconds):
            where = _here(connection) if page else _form_page(connection, settings.public_origin)
            raise ReauthenticationRequired(where, page=page)


def provide_operator(request: Request[Any, Any, Any]) -> auth.Operator:
    """The ``operator`` dependency of every non-public console handler."""
    operator: auth.Operator = request.scope["state"][OPERATOR_STATE]
    return operator
