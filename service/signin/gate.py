"""The browser identity check every kind page runs first (DESIGN §5).

A flow URL grants nothing by itself: before a page shows or accepts anything, the person in the
browser must prove — by logging in at the flow's issuer — that they are the flow's subject.

Interface for kind pages (``gate`` is the process's ``BrowserGate``, a handler dependency)::

    identity = await gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity            # a redirect to the issuer's login, or a refusal page
    ...                            # identity.iss/.sub are the flow's subject; render with identity.csrf_token
    checked = await gate.checked_post(request, flow_ref, kind)   # every POST handler: all checks, in order

``require_subject`` also writes the audit events: ``browser_visit`` for every checked request,
``subject_mismatch`` when another account opens the link (the flow itself is never touched).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.crypto.vault import Vault
from service.db.base import FLOW_ID
from service.errors import Forbidden
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, pending_flow
from service.flows.service import FlowService
from service.flows.states import Actor
from service.identity import sessions as store
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.identity.oidc import authorization_url
from service.settings import Settings

CALLBACK_PATH = "/auth/callback"
# Where a login may return to: a flow page of this origin, nothing else (no open redirect).
_RETURN_TO = re.compile(r"^/f/fl_[0-9a-f]{32}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")


class CsrfFailed(Forbidden):
    code = "csrf_failed"
    title = "This form has expired"

    def __init__(self) -> None:
        super().__init__("The form could not be verified. Reload the page and try again.")


@dataclass(frozen=True, slots=True)
class BrowserIdentity:
    """The verified person in the browser, equal to the flow's subject."""

    session_id: str
    iss: str
    sub: str
    csrf_token: str = field(repr=False)


def safe_return_to(value: str | None) -> str | None:
    """The path itself when it is a same-origin flow page, else None."""
    if value is None or not _RETURN_TO.fullmatch(value):
        return None
    return value


def flow_path(flow: Flow) -> str:
    return f"/f/{FLOW_ID.format(flow.id)}"


def redirect_uri(settings: Settings) -> str:
    """Fixed and exact: the one URI registered at every issuer."""
    return settings.public_url + CALLBACK_PATH


def csrf_token_for(session: store.SessionRow) -> str:
    mac = hmac.new(session.csrf_secret, b"elicitd-csrf\x00" + session.id, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def session_cookie(settings: Settings, request: Request[Any, Any, Any]) -> str | None:
    value = request.cookies.get(store.cookie_name(settings, store.SESSION_COOKIE))
    return value if value is not None and _TOKEN.fullmatch(value) else None


def make_cookie(settings: Settings, base: str, value: str, max_age: int) -> Cookie:
    return Cookie(
        key=store.cookie_name(settings, base),
        value=value,
        max_age=max_age,
        path="/",
        secure=settings.secure_cookies,
        httponly=True,
        samesite="lax",
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
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        issuers: IssuerDirectory,
        flows: FlowService,
    ) -> None:
        self.settings = settings
        self._sessions = sessions
        self._vault = vault
        self.issuers = issuers
        self.flows = flows

    def session_cookie(self, request: Request[Any, Any, Any]) -> str | None:
        return session_cookie(self.settings, request)

    async def start_login(
        self, request: Request[Any, Any, Any], issuer: ResolvedIssuer, return_to: str, *, prompt: str | None = None
    ) -> Response[Any]:
        """Record a login attempt and send the browser to the issuer.

        The attempt is tied to a pre-login cookie (reused across tabs so parallel logins work), so a
        ``state`` sent to another browser — a login CSRF or a forwarded link — fails at the callback.
        """
        settings = self.settings
        binding = request.cookies.get(store.cookie_name(settings, store.LOGIN_COOKIE))
        if binding is None or not _TOKEN.fullmatch(binding):
            binding = store.new_token()
        state, nonce, verifier = store.new_token(), store.new_token(), secrets.token_urlsafe(64)
        async with self._sessions() as session:
            await store.create_login_attempt(
                session,
                self._vault,
                state=state,
                browser_binding=binding,
                issuer_id=issuer.id,
                code_verifier=verifier,
                nonce=nonce,
                return_to=return_to,
            )
            await session.commit()
        url = authorization_url(
            issuer, redirect_uri=redirect_uri(settings), state=state, nonce=nonce, code_verifier=verifier, prompt=prompt
        )
        return redirect(url, cookies=[make_cookie(settings, store.LOGIN_COOKIE, binding, store.LOGIN_STATE_SECONDS)])

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
        """
        flows = self.flows
        issuer = await self.issuers.resolve(flow.subject_iss)
        if issuer is None:
            async with flows.unit_of_work() as uow:
                await uow.event(flow.id, "issuer_not_registered", Actor.BROWSER, {"iss": flow.subject_iss})
            return page(
                "signin_problem.html",
                403,
                heading="This sign-in service is not trusted here",
                text="The account this request is for belongs to a sign-in service this elicitd does not "
                "trust, so it cannot check who you are. Ask the service that sent you here to contact "
                "its administrator.",
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
        """Raise ``CsrfFailed`` (403, ``csrf_failed``) unless ``submitted`` is this session's token.

        The token is an HMAC of the session id under the session's own secret (a synchronizer token:
        nothing to forge without the session). A cross-site ``Origin`` is refused as well.
        """
        if cross_site_origin(self.settings, request):
            raise CsrfFailed
        if submitted is None or not hmac.compare_digest(submitted.encode(), identity.csrf_token.encode()):
            raise CsrfFailed

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
